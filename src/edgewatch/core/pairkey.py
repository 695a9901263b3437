"""Pairwise keys of the liveness datagrams (:mod:`edgewatch.core.liveness`): each node's X25519
exchange key, published bound to its Ed25519 identity, and the two directional keys any two nodes
derive from their exchange keys without a message between them.

What it is for
    A liveness datagram goes to every neighbour every period; an Ed25519 signature on each (64 bytes
    and a ~60 us check) would be most of its size and of the agent's CPU. A MAC with a key only the
    two nodes can compute serves instead (HMAC-SHA256, about a microsecond): a third node, even a
    compromised member, cannot forge or alter a datagram between two others, and a datagram
    cannot be reflected to its sender (each direction has its own key). A MAC is not transferable
    (the receiver could have made it), which is why only liveness travels under it; what the
    controller counts stays signed (the Ed25519 statement).

Binding (the attack is key substitution)
    An exchange key counts for node ``n`` only with a signature by one of ``n``'s published
    identity keys over :func:`exchange_binding` (the node's name and the exchange key; domain
    :data:`EXCHANGE_BINDING_DOMAIN`). The identity keys themselves are bound to the node by the
    apiserver (each node writes only its own record) and by their proof of possession
    (:mod:`edgewatch.core.identity`). So a node cannot publish a key as another's, and a copy of
    another node's exchange key under its own name gives it nothing: the derivation mixes in both
    names, so the copied key derives different keys than the real pair does.

Derivation (:func:`derive_pair_keys`)
    ``shared = X25519(my private, peer public)``, refused if all zero (a low-order point);
    ``okm = HKDF-SHA256(shared, salt = empty, info = domain || 0 || first name || 0 || second name
    || 0 || first public || second public, 64 bytes)`` where "first" is the node whose name sorts
    first; the first 32 bytes key datagrams from the first node to the second, the last 32 the
    other way. Both ends compute the same two keys; neither is sent.

Record (the ``exchange-key`` value of the node's ``edgewatch-nodes/<node>`` ConfigMap)::

    <base64 of the raw 32-byte X25519 public key> <identity key id: 32 hex> <signature: 128 hex>

Limits: a compromised node knows its own pair keys, so it can forge datagrams *to itself* from any
neighbour (it can lie to itself anyway) and tell a third node nothing false. Keys are static per
exchange key, and an exchange key is derived from its node's signing identity key
(:meth:`ExchangeKey.derived_from`): it rotates with that key (the record is rewritten). Sources:
RFC 7748 (X25519), RFC 5869 (HKDF), RFC 2104 and RFC 4868 (HMAC-SHA256 truncated to 128 bits);
WireGuard and Noise's static-static DH for keys two parties derive alone.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from edgewatch.core.identity import NodeKey
from edgewatch.core.signing import canonical_json, check_domain
from edgewatch.core.types import is_node_name

__all__ = [
    "EXCHANGE_BINDING_DOMAIN",
    "EXCHANGE_KEY_DERIVATION_DOMAIN",
    "PAIR_KEY_DOMAIN",
    "ExchangeKey",
    "ExchangeRecordError",
    "PairKeys",
    "derive_pair_keys",
    "exchange_binding",
    "format_exchange_record",
    "verify_exchange_record",
]

EXCHANGE_BINDING_DOMAIN: Final = "edgewatch/exchange-key/v1"
"""Signature domain of an exchange key's binding to its node."""
PAIR_KEY_DOMAIN: Final = "edgewatch/pair-keys/v1"
EXCHANGE_KEY_DERIVATION_DOMAIN: Final = "edgewatch/exchange-key-derivation/v1"
"""HKDF info of an exchange key derived from its node's identity key (:meth:`ExchangeKey.derived_from`)."""
"""HKDF info prefix of the pair keys."""
MAX_EXCHANGE_RECORD_BYTES: Final = 256
_RECORD = re.compile(r"([A-Za-z0-9+/]{43}=) ([0-9a-f]{32}) ([0-9a-f]{128})\n?")
_PROBE_KEY: Final = X25519PrivateKey.from_private_bytes(bytes(range(1, 33)))
"""A fixed scalar: a public key whose shared secret with it is all zero is a low-order point
(RFC 7748 section 6.1), refused when its record is read rather than at every datagram."""


class ExchangeRecordError(ValueError):
    """An exchange key record refused: malformed, signed by no identity key of its node, or a
    signature that does not match."""


class ExchangeKey:
    """One node's private X25519 exchange key. The repr never shows the key."""

    __slots__ = ("_key", "public_raw")

    def __init__(self, key: X25519PrivateKey) -> None:
        self._key = key
        self.public_raw: bytes = key.public_key().public_bytes(serialization.Encoding.Raw,
                                                               serialization.PublicFormat.Raw)

    @classmethod
    def generate(cls) -> ExchangeKey:
        """A new random key (the OS's CSPRNG)."""
        return cls(X25519PrivateKey.generate())

    @classmethod
    def derived_from(cls, identity: NodeKey) -> ExchangeKey:
        """The exchange key of the node whose identity key is ``identity``: 32 bytes derived from
        it under :data:`EXCHANGE_KEY_DERIVATION_DOMAIN` (``NodeKey.derive_secret``), so an agent
        needs no second key file, keeps its exchange key across restarts (its peers' pair keys stay
        valid) and rotates it with its identity key."""
        return cls(X25519PrivateKey.from_private_bytes(identity.derive_secret(domain=EXCHANGE_KEY_DERIVATION_DOMAIN)))

    @classmethod
    def from_raw(cls, raw: bytes) -> ExchangeKey:
        """The key of 32 raw private bytes.

        Raises:
            ValueError: not 32 bytes.
        """
        if len(raw) != 32:
            raise ValueError("an X25519 private key is 32 raw bytes")
        return cls(X25519PrivateKey.from_private_bytes(bytes(raw)))

    def private_raw(self) -> bytes:
        """The 32 raw private bytes (for the key file only)."""
        return self._key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                                       serialization.NoEncryption())

    def shared(self, peer_public_raw: bytes) -> bytes:
        """The X25519 shared secret with ``peer_public_raw`` (32 bytes).

        Raises:
            ValueError: not a 32-byte key, or a low-order point (the secret would be all zero).
        """
        if not isinstance(peer_public_raw, (bytes, bytearray)) or len(peer_public_raw) != 32:
            raise ValueError("an X25519 public key is 32 raw bytes")
        secret = self._key.exchange(X25519PublicKey.from_public_bytes(bytes(peer_public_raw)))
        if not any(secret):
            raise ValueError("X25519 with a low-order point: refused")
        return secret

    def __repr__(self) -> str:
        return f"ExchangeKey(public={self.public_raw.hex()[:16]}...)"


def exchange_binding(*, node: str, public_raw: bytes) -> bytes:
    """What an identity key signs to bind exchange key ``public_raw`` to ``node``: the canonical
    JSON ``{"exchange_key": <base64>, "node": <node>}``."""
    return canonical_json({"exchange_key": base64.b64encode(public_raw).decode("ascii"), "node": node})


def format_exchange_record(key: ExchangeKey, *, identity: NodeKey, node: str) -> str:
    """``node``'s exchange key record, signed by its identity key ``identity``."""
    proof = identity.sign(exchange_binding(node=node, public_raw=key.public_raw), domain=EXCHANGE_BINDING_DOMAIN)
    return f"{base64.b64encode(key.public_raw).decode('ascii')} {identity.key_id} {proof}\n"


def verify_exchange_record(*, node: str, text: object, identity_keys: Mapping[str, Ed25519PublicKey]) -> bytes:
    """The raw X25519 public key of ``node``'s untrusted record ``text``, if one of ``node``'s
    published identity keys (``identity_keys``: key id -> key, only that node's) signed it.

    Raises:
        ExchangeRecordError: not a str, over :data:`MAX_EXCHANGE_RECORD_BYTES`, not the record's
            form, a key not in canonical base64 or a low-order point, an identity key id that is
            not ``node``'s, or a signature that does not match.
    """
    if not isinstance(text, str) or len(text) > MAX_EXCHANGE_RECORD_BYTES:
        raise ExchangeRecordError("an exchange key record is a short string")
    m = _RECORD.fullmatch(text)
    if m is None:
        raise ExchangeRecordError("an exchange key record is '<base64 key> <key id> <128 hex>'")
    try:
        public_raw = base64.b64decode(m.group(1), validate=True)
    except (binascii.Error, ValueError):
        raise ExchangeRecordError("the exchange key is not base64") from None
    if len(public_raw) != 32:
        raise ExchangeRecordError("an X25519 public key is 32 raw bytes")
    if base64.b64encode(public_raw).decode("ascii") != m.group(1):
        raise ExchangeRecordError("the exchange key is not in canonical base64")  # one key, one spelling
    try:
        probe = _PROBE_KEY.exchange(X25519PublicKey.from_public_bytes(public_raw))
    except ValueError:  # cryptography refuses an all-zero shared secret itself
        probe = bytes(32)
    if not any(probe):
        raise ExchangeRecordError("the exchange key is a low-order point (every shared secret would be zero)")
    identity = identity_keys.get(m.group(2))
    if identity is None:
        raise ExchangeRecordError(f"key id {m.group(2)} is not one of {node}'s identity keys")
    data = check_domain(EXCHANGE_BINDING_DOMAIN) + exchange_binding(node=node, public_raw=public_raw)
    try:
        identity.verify(bytes.fromhex(m.group(3)), data)
    except InvalidSignature:
        raise ExchangeRecordError(f"the exchange key's binding to {node} does not verify") from None
    return public_raw


@dataclass(frozen=True)
class PairKeys:
    """The two keys of one pair, seen from one end: ``send`` MACs what this node sends the peer,
    ``receive`` what it receives from the peer (32 bytes each). The repr shows neither."""

    send: bytes
    receive: bytes

    def __repr__(self) -> str:
        return "PairKeys(...)"


def derive_pair_keys(*, me: str, my_key: ExchangeKey, peer: str, peer_public_raw: bytes) -> PairKeys:
    """The pair keys of ``me`` and ``peer`` (see the module docstring's derivation).

    Raises:
        ValueError: a name that is not a node name, ``me == peer``, or a peer key that is not a
            32-byte X25519 key or is a low-order point.
    """
    if not is_node_name(me) or not is_node_name(peer):
        raise ValueError("pair keys need two node names")
    if me == peer:
        raise ValueError("a node has no pair key with itself")
    secret = my_key.shared(peer_public_raw)
    ends = sorted([(me, my_key.public_raw), (peer, bytes(peer_public_raw))])
    info = (check_domain(PAIR_KEY_DOMAIN) + ends[0][0].encode("ascii") + b"\x00" + ends[1][0].encode("ascii")
            + b"\x00" + ends[0][1] + ends[1][1])
    okm = HKDF(algorithm=hashes.SHA256(), length=64, salt=None, info=info).derive(secret)
    first_to_second, second_to_first = okm[:32], okm[32:]
    if me == ends[0][0]:
        return PairKeys(send=first_to_second, receive=second_to_first)
    return PairKeys(send=second_to_first, receive=first_to_second)

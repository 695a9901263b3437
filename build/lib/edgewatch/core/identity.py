"""Per-node identity: each agent's own Ed25519 signing key, the public keys of the other nodes, and
the signer the wire uses (:class:`NodeKeyring`, the :class:`edgewatch.core.signing.Signer` of
:mod:`edgewatch.core.wire`).

What it is for (issue 12, docs/security.md)
    Every message on the peer wire, and every heartbeat relayed by others, is signed by the node
    that wrote it with a key only that node holds. A verifier accepts a signature only with a key
    published *for that node* — the key's owner must be the heartbeat's origin or the envelope's
    sender — so no key lets one node speak for another (the shared HMAC key of old did: SuperEdge's
    edge-health had the same flaw, with a public fallback key on top).

    Where public keys come from is the caller's business: the agent publishes its own in the
    ConfigMap ``edgewatch-nodes/<node>`` (key ``keys``), which the apiserver lets only the agent
    whose pod-bound token names that node write (``deploy/15-policy-agent.yaml``), and reads the
    others' from there (:func:`parse_key_record`).

Formats
    key id: the first 16 bytes of SHA-256 of the raw 32-byte public key, 32 lower-case hex
    characters (so it names the key, not the node, and a forged record cannot reuse it without the
    key). Signature: Ed25519 over ``domain || 0x00 || data``, 128 lower-case hex characters
    (``domain`` separates message kinds as in :mod:`edgewatch.core.signing`). Key record (the
    ConfigMap value), one key a line, the signing key first, at most :data:`MAX_KEYS_PER_NODE`::

        3f2a...(32 hex) MCowBQYDK2VwAyEA...   <- base64 of the raw 32-byte public key

    Key file (the agent's state dir, mode 0600): PKCS#8 PEM blocks, the signing key first; the
    others are earlier keys still published while peers may hold messages signed with them.

Rotation without downtime (:func:`rotate_key_file`): a new key is put first and the old one kept
second; the agent publishes both, then signs with the new one; peers accept either until the old
one is dropped at the next rotation.

Limits: verification costs about 60 us per signature (``cryptography``'s OpenSSL Ed25519), signing
about 20 us; a key record is trusted as the caller found it (the binding is the apiserver's).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from edgewatch.core.signing import Verification, canonical_json, check_domain
from edgewatch.core.types import NodeName, is_node_name

__all__ = [
    "KEY_ID_HEX",
    "MAX_KEYS_PER_NODE",
    "SIGNATURE_HEX",
    "NodeKey",
    "NodeKeyring",
    "PublicKeys",
    "format_key_record",
    "key_id_of",
    "load_or_create_key_file",
    "parse_key_record",
    "rotate_key_file",
]

KEY_ID_HEX: Final = 32
SIGNATURE_HEX: Final = 128
MAX_KEYS_PER_NODE: Final = 2
"""The signing key and the one before it (rotation keeps one old key)."""
MAX_RECORD_BYTES: Final = 1024

_KEY_ID = re.compile(r"[0-9a-f]{32}")
_SIG = re.compile(r"[0-9a-f]{128}")
_MAC_FIELD: Final = "mac"
_KEY_ID_FIELD: Final = "key_id"


def key_id_of(public_raw: bytes) -> str:
    """The key id of a raw 32-byte Ed25519 public key (32 hex characters).

    Raises:
        ValueError: ``public_raw`` is not 32 bytes.
    """
    if not isinstance(public_raw, (bytes, bytearray)) or len(public_raw) != 32:
        raise ValueError("an Ed25519 public key is 32 raw bytes")
    return hashlib.sha256(bytes(public_raw)).hexdigest()[:KEY_ID_HEX]


def _raw(public: Ed25519PublicKey) -> bytes:
    return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


class NodeKey:
    """One private signing key (Ed25519) of one node. The repr never shows the key."""

    __slots__ = ("_key", "key_id", "public_raw")

    def __init__(self, key: Ed25519PrivateKey) -> None:
        self._key = key
        self.public_raw: bytes = _raw(key.public_key())
        self.key_id: str = key_id_of(self.public_raw)

    @classmethod
    def generate(cls) -> NodeKey:
        """A new random key (the OS's CSPRNG)."""
        return cls(Ed25519PrivateKey.generate())

    def sign(self, data: bytes, *, domain: str) -> str:
        """Hex Ed25519 signature of ``domain || 0x00 || data`` (128 characters).

        Raises:
            ValueError: invalid ``domain``.
        """
        return self._key.sign(check_domain(domain) + bytes(data)).hex()

    def pem(self) -> bytes:
        """The private key as unencrypted PKCS#8 PEM (for the key file only)."""
        return self._key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption())

    def __repr__(self) -> str:
        return f"NodeKey(key_id={self.key_id!r})"


def format_key_record(keys: Iterable[NodeKey]) -> str:
    """The key record of ``keys`` (signing key first): ``"<key id> <base64 raw key>\\n"`` a line."""
    return "".join(f"{k.key_id} {base64.b64encode(k.public_raw).decode('ascii')}\n" for k in keys)


def parse_key_record(text: object) -> tuple[tuple[str, bytes], ...]:
    """Parse an untrusted key record into ``((key id, raw public key), ...)``, signing key first.

    Raises:
        ValueError: not a str, over :data:`MAX_RECORD_BYTES`, no key, more than
            :data:`MAX_KEYS_PER_NODE`, a line that is not ``<32 hex> <base64 of 32 bytes>``, a key id
            that is not the key's own (:func:`key_id_of`), or a duplicate.
    """
    if not isinstance(text, str):
        raise ValueError("key record must be text")
    if len(text.encode("utf-8", "replace")) > MAX_RECORD_BYTES:
        raise ValueError(f"key record over {MAX_RECORD_BYTES} bytes")
    out: list[tuple[str, bytes]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2 or not _KEY_ID.fullmatch(parts[0]):
            raise ValueError("each key line must be '<32 hex key id> <base64 key>'")
        try:
            raw = base64.b64decode(parts[1], validate=True)
        except (binascii.Error, ValueError):
            raise ValueError(f"key {parts[0]}: not base64") from None
        if len(raw) != 32:
            raise ValueError(f"key {parts[0]}: {len(raw)} bytes, an Ed25519 public key is 32")
        if key_id_of(raw) != parts[0]:
            raise ValueError(f"key {parts[0]}: the id is not the key's own")
        if any(k == parts[0] for k, _ in out):
            raise ValueError(f"key {parts[0]}: listed twice")
        out.append((parts[0], raw))
    if not out:
        raise ValueError("key record has no key")
    if len(out) > MAX_KEYS_PER_NODE:
        raise ValueError(f"key record has {len(out)} keys; at most {MAX_KEYS_PER_NODE}")
    return tuple(out)


class PublicKeys:
    """The published keys of the nodes: ``node -> keys`` and ``key id -> node``. Single-threaded.

    A key id claimed by two nodes (possible only by publishing the same public key twice) is
    refused for the later one: :meth:`update` raises and keeps the earlier owner.

    Signatures that verified are remembered (the last ``verified_cache`` of them, keyed by key id,
    signature and a BLAKE2b-256 of the signed bytes): the same heartbeat reaches a node several
    times (directly, relayed, carried), and an Ed25519 check costs about 100 us on a small CPU.
    Ed25519 is deterministic, so identical bytes, key and signature always verify alike; removing a
    node's keys drops them from the lookup before the cache is consulted.
    """

    __slots__ = ("_by_id", "_by_node", "_verified", "_verified_max")

    def __init__(self, *, verified_cache: int = 4096) -> None:
        self._by_node: dict[NodeName, tuple[str, ...]] = {}
        self._by_id: dict[str, tuple[NodeName, Ed25519PublicKey]] = {}
        self._verified: dict[bytes, None] = {}  # insertion-ordered: the oldest is dropped first
        self._verified_max = verified_cache

    def __len__(self) -> int:
        return len(self._by_node)

    def update(self, node: NodeName, record: object) -> bool:
        """Set ``node``'s keys from its untrusted key record; True if they changed.

        Raises:
            ValueError: a bad record (:func:`parse_key_record`), a bad node name, or a key id
                already owned by another node. The node's keys stay as they were.
        """
        if not is_node_name(node):
            raise ValueError("not a node name")
        parsed = parse_key_record(record)
        for key_id, _ in parsed:
            held = self._by_id.get(key_id)
            if held is not None and held[0] != node:
                raise ValueError(f"key {key_id} is already published by {held[0]}")
        ids = tuple(k for k, _ in parsed)
        if self._by_node.get(node) == ids:
            return False
        self.remove(node)
        for key_id, raw in parsed:
            self._by_id[key_id] = (node, Ed25519PublicKey.from_public_bytes(raw))
        self._by_node[node] = ids
        return True

    def add_own(self, node: NodeName, keys: Iterable[NodeKey]) -> None:
        """Register this node's own keys (no record parsing)."""
        self.update(node, format_key_record(keys))

    def remove(self, node: NodeName) -> None:
        """Forget ``node``'s keys (its record was deleted)."""
        for key_id in self._by_node.pop(node, ()):
            self._by_id.pop(key_id, None)

    def owner(self, key_id: object) -> NodeName | None:
        """The node that published ``key_id``, or None."""
        if not isinstance(key_id, str):
            return None
        held = self._by_id.get(key_id)
        return None if held is None else held[0]

    def keys_of(self, node: NodeName) -> tuple[str, ...]:
        """``node``'s key ids, signing key first (empty if none)."""
        return self._by_node.get(node, ())

    def verify(self, signed: object, *, domain: str) -> Verification:
        """Check the ``key_id``/``mac`` of a signed object (parsed JSON): the signature over the
        canonical JSON of the object without ``mac``. Never raises for any ``signed`` value;
        ValueError only for an invalid ``domain``."""
        check_domain(domain)
        if not isinstance(signed, Mapping):
            return Verification.MALFORMED
        if _MAC_FIELD not in signed or _KEY_ID_FIELD not in signed:
            return Verification.UNSIGNED
        body = {k: v for k, v in signed.items() if k != _MAC_FIELD}
        try:
            data = canonical_json(body)
        except (ValueError, TypeError, RecursionError):
            return Verification.MALFORMED
        return self.verify_bytes(key_id=signed[_KEY_ID_FIELD], mac=signed[_MAC_FIELD], data=data, domain=domain)

    def verify_bytes(self, *, key_id: object, mac: object, data: bytes, domain: str) -> Verification:
        """Check a hex signature over raw bytes: OK, UNKNOWN_KEY, MALFORMED or BAD_SIGNATURE.

        Never raises for hostile input; ValueError only for an invalid ``domain``.
        """
        prefix = check_domain(domain)
        if not isinstance(key_id, str) or not isinstance(mac, str) or not isinstance(data, (bytes, bytearray)):
            return Verification.MALFORMED
        if not _KEY_ID.fullmatch(key_id) or not _SIG.fullmatch(mac):
            return Verification.MALFORMED
        held = self._by_id.get(key_id)
        if held is None:
            return Verification.UNKNOWN_KEY
        signed = prefix + bytes(data)
        memo = hashlib.blake2b(signed, digest_size=32, key=bytes.fromhex(key_id)).digest() + bytes.fromhex(mac)
        if memo in self._verified:
            return Verification.OK
        try:
            held[1].verify(bytes.fromhex(mac), signed)
        except InvalidSignature:
            return Verification.BAD_SIGNATURE
        if self._verified_max:
            if len(self._verified) >= self._verified_max:
                del self._verified[next(iter(self._verified))]
            self._verified[memo] = None
        return Verification.OK


class NodeKeyring:
    """This node's signer and every node's verifier: the :class:`edgewatch.core.signing.Signer`
    the wire uses. Signs with this node's first key; verifies with any published key and says whose
    it is (:meth:`owner`), which the wire compares with the claimed origin or sender.

    Args:
        node: this node's name.
        keys: this node's keys, signing key first (registered in ``public``).
        public: the other nodes' published keys (shared with whoever keeps them current).

    Raises:
        ValueError: no keys, or a bad node name.
    """

    __slots__ = ("_keys", "node", "public")

    def __init__(self, *, node: NodeName, keys: Iterable[NodeKey], public: PublicKeys | None = None) -> None:
        self._keys = tuple(keys)
        if not self._keys:
            raise ValueError("a node keyring needs at least one key")
        self.node = node
        self.public = public if public is not None else PublicKeys()
        self.public.add_own(node, self._keys)

    @property
    def primary_key_id(self) -> str:
        """Id of the key that signs."""
        return self._keys[0].key_id

    @property
    def own_keys(self) -> tuple[NodeKey, ...]:
        """This node's keys, signing key first."""
        return self._keys

    def record(self) -> str:
        """This node's key record (what it publishes)."""
        return format_key_record(self._keys)

    def owner(self, key_id: object) -> NodeName | None:
        """The node that published ``key_id``, or None if unknown."""
        return self.public.owner(key_id)

    def sign_bytes(self, data: bytes, *, domain: str) -> tuple[str, str]:
        """``(key id, hex signature)`` of raw bytes with the signing key.

        Raises:
            TypeError: ``data`` is not bytes. ValueError: invalid ``domain``.
        """
        if not isinstance(data, (bytes, bytearray)):
            raise TypeError(f"data must be bytes, got {type(data).__name__}")
        key = self._keys[0]
        return key.key_id, key.sign(bytes(data), domain=domain)

    def verify_bytes(self, *, key_id: object, mac: object, data: bytes, domain: str) -> Verification:
        """See :meth:`PublicKeys.verify_bytes`."""
        return self.public.verify_bytes(key_id=key_id, mac=mac, data=data, domain=domain)

    def sign(self, payload: Mapping[str, object], *, domain: str) -> dict[str, object]:
        """A copy of ``payload`` with ``key_id`` and ``mac`` (the hex signature of the canonical
        JSON of the payload with ``key_id``) added.

        Raises:
            ValueError: ``payload`` already has ``key_id`` or ``mac``, invalid ``domain``, or no
                canonical form (:func:`edgewatch.core.signing.canonical_json`).
        """
        if _MAC_FIELD in payload or _KEY_ID_FIELD in payload:
            raise ValueError("payload must not contain 'key_id' or 'mac' before signing")
        body: dict[str, object] = dict(payload)
        body[_KEY_ID_FIELD] = self.primary_key_id
        body[_MAC_FIELD] = self._keys[0].sign(canonical_json(body), domain=domain)
        return body

    def verify(self, signed: object, *, domain: str) -> Verification:
        """Check the ``key_id``/``mac`` of a signed object (parsed JSON). Never raises for any
        ``signed`` value; ValueError only for an invalid ``domain``."""
        return self.public.verify(signed, domain=domain)

    def __repr__(self) -> str:
        return f"NodeKeyring(node={self.node!r}, key_ids={[k.key_id for k in self._keys]!r})"


# --------------------------------------------------------------------------- key file

_PEM_BLOCK = re.compile(rb"-----BEGIN PRIVATE KEY-----.+?-----END PRIVATE KEY-----\s*", re.S)


def _read_keys(path: Path) -> list[NodeKey]:
    keys: list[NodeKey] = []
    for block in _PEM_BLOCK.findall(path.read_bytes()):
        key = serialization.load_pem_private_key(block, password=None)
        if not isinstance(key, Ed25519PrivateKey):
            raise ValueError(f"{path}: not an Ed25519 key")
        keys.append(NodeKey(key))
    if not keys:
        raise ValueError(f"{path}: no private key")
    return keys[:MAX_KEYS_PER_NODE]


def _write_keys(path: Path, keys: Iterable[NodeKey]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".identity-")
    try:
        with os.fdopen(fd, "wb") as out:
            for key in keys:
                out.write(key.pem())
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_or_create_key_file(path: str | os.PathLike[str]) -> tuple[NodeKey, ...]:
    """This node's keys from ``path`` (signing key first), creating the file with a new key (mode
    0600, written atomically) if it does not exist. A node keeps its identity across agent restarts
    this way, also while it is cut off from the cloud and cannot publish a new key.

    Raises:
        ValueError: the file exists but holds no Ed25519 PKCS#8 key. OSError: it cannot be read or
            written.
    """
    p = Path(path)
    if p.exists():
        return tuple(_read_keys(p))
    keys = (NodeKey.generate(),)
    _write_keys(p, keys)
    return keys


def rotate_key_file(path: str | os.PathLike[str]) -> tuple[NodeKey, ...]:
    """Put a new key first in the key file and keep the current one second (older ones are
    dropped); returns the new keys. The agent publishes both at its next start.

    Raises:
        ValueError / OSError: as :func:`load_or_create_key_file`.
    """
    p = Path(path)
    old = _read_keys(p) if p.exists() else []
    keys = (NodeKey.generate(), *old[: MAX_KEYS_PER_NODE - 1])
    _write_keys(p, keys)
    return keys

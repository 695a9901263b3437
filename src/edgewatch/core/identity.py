"""Per-node identity: each agent's own Ed25519 signing key, the public keys of the other nodes, and
the signer the wire uses (:class:`NodeKeyring`, the :class:`edgewatch.core.signing.Signer` of
:mod:`edgewatch.core.wire`).

What it is for (docs/security.md)
    Every message on the peer wire, and every heartbeat relayed by others, is signed by the node
    that wrote it with a key only that node holds. A verifier accepts a signature only with a key
    published *for that node* — the key's owner must be the heartbeat's origin or the envelope's
    sender — so no key lets one node speak for another (the shared HMAC key of old did: SuperEdge's
    edge-health had the same flaw, with a public fallback key on top).

    Where public keys come from is the caller's business: the agent publishes its own in the
    ConfigMap ``edgewatch-nodes/<node>`` (key ``keys``), which the apiserver lets only the agent
    whose pod-bound token names that node write (``deploy/15-policy-agent.yaml``), and reads the
    others' from there (:meth:`PublicKeys.update`).

Keys bound to their owner by proof of possession (attack "key squatting")
    The apiserver binds a *record* to its node, not the keys in it: a compromised node could list
    another node's public key in its own record, and a reader that kept the first-seen owner (every
    fresh controller leader, every agent without saved state: records are listed in name order)
    then gave the key to the squatter and refused every message of its real owner. So each line
    carries a proof: the key's own signature over :func:`key_binding` (the node's name and the key
    id, domain :data:`KEY_BINDING_DOMAIN`). A squatter cannot sign over its own name with a key it
    does not hold, so its line is refused whatever order records are read in (``bad_key_proof``);
    a key id already owned by another node is still refused (``key_conflict``: both proved the key,
    so both hold the private key, i.e. it was copied).

Formats
    key id: the first 16 bytes of SHA-256 of the raw 32-byte public key, 32 lower-case hex
    characters (so it names the key, not the node, and a forged record cannot reuse it without the
    key). Signature: Ed25519 over ``domain || 0x00 || data``, 128 lower-case hex characters
    (``domain`` separates message kinds as in :mod:`edgewatch.core.signing`). Key record (the
    ConfigMap value), one key a line, the signing key first, at most :data:`MAX_KEYS_PER_NODE`:
    key id, base64 of the raw 32-byte public key, and the proof of possession (that key's
    signature over :func:`key_binding`, domain ``edgewatch/key-binding/v1``), e.g.::

        c68c9fa38d918b0c1f7ad3ed74df86fd hBozjkb3SdeqiL1NUpHQbsdMTPiywky//LwF+G6iqog= d4b7f742...(128 hex)

    (node ``a-1``; the proof signs ``{"key_id":"c68c9fa38d918b0c1f7ad3ed74df86fd","node":"a-1"}``;
    :func:`parse_key_record` checks the form, :func:`verify_key_record` the proofs too).

    Key file (the agent's state dir, mode 0600): PKCS#8 PEM blocks, the signing key first; the
    others are earlier keys still published while peers may hold messages signed with them.

Rotation without downtime (:func:`rotate_key_file`): a new key is put first and the old one kept
second; the agent publishes both, then signs with the new one; peers accept either until the old
one is dropped at the next rotation.

Limits: verification costs about 60 us per signature (``cryptography``'s OpenSSL Ed25519), signing
about 20 us, so reading a record costs one check per key. A proof shows possession, not
legitimacy: a node's key file copied to another node (a stolen key, or a cloned disk image) lets
either publish it, and the first-seen owner keeps it; the binding of a record to its node is the
apiserver's.
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
from typing import Final, NamedTuple

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from edgewatch.core.signing import Verification, canonical_json, check_domain
from edgewatch.core.types import NodeName, is_node_name

__all__ = [
    "BAD_KEY_PROOF",
    "BAD_KEY_RECORD",
    "KEY_BINDING_DOMAIN",
    "KEY_CONFLICT",
    "KEY_ID_HEX",
    "MAX_KEYS_PER_NODE",
    "SIGNATURE_HEX",
    "NodeKey",
    "KeyRecordError",
    "NodeKeyring",
    "PublicKey",
    "PublicKeys",
    "format_key_record",
    "key_binding",
    "key_id_of",
    "load_or_create_key_file",
    "parse_key_record",
    "rotate_key_file",
    "verify_key_record",
]

KEY_ID_HEX: Final = 32
SIGNATURE_HEX: Final = 128
MAX_KEYS_PER_NODE: Final = 2
"""The signing key and the one before it (rotation keeps one old key)."""
MAX_RECORD_BYTES: Final = 1024

KEY_BINDING_DOMAIN: Final = "edgewatch/key-binding/v1"
"""Signature domain of a key line's proof of possession (:func:`key_binding`)."""
BAD_KEY_RECORD: Final = "bad_key_record"
BAD_KEY_PROOF: Final = "bad_key_proof"
KEY_CONFLICT: Final = "key_conflict"

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

    def derive_secret(self, *, domain: str) -> bytes:
        """32 bytes derived from this private key for ``domain`` (HKDF-SHA256, RFC 5869, over the
        key's 32-byte seed, ``info`` the checked domain): another key of this node that needs no
        file of its own and changes with this key. Distinct domains give independent bytes; the
        seed cannot be recovered from them.

        Raises:
            ValueError: invalid ``domain``.
        """
        seed = self._key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                                       serialization.NoEncryption())
        return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=check_domain(domain)).derive(seed)

    def pem(self) -> bytes:
        """The private key as unencrypted PKCS#8 PEM (for the key file only)."""
        return self._key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption())

    def __repr__(self) -> str:
        return f"NodeKey(key_id={self.key_id!r})"


class KeyRecordError(ValueError):
    """A key record refused; ``reason`` is the metric label: :data:`BAD_KEY_RECORD` (malformed),
    :data:`BAD_KEY_PROOF` (a line's proof of possession missing, malformed or not verifying) or
    :data:`KEY_CONFLICT` (a key another node already published)."""

    def __init__(self, message: str, *, reason: str = BAD_KEY_RECORD) -> None:
        super().__init__(message)
        self.reason = reason


class PublicKey(NamedTuple):
    """One parsed key line: key id, raw 32-byte public key, hex proof of possession (128)."""

    key_id: str
    public_raw: bytes
    proof: str


def key_binding(*, node: str, key_id: str) -> bytes:
    """The bytes a key line's proof signs (domain :data:`KEY_BINDING_DOMAIN`): the canonical JSON
    ``{"key_id": <key id>, "node": <node>}``, so a proof is valid for one node and one key only."""
    return canonical_json({"key_id": key_id, "node": node})


def format_key_record(keys: Iterable[NodeKey], *, node: NodeName) -> str:
    """``node``'s key record of ``keys`` (signing key first): ``"<key id> <base64 raw key> <proof>\\n"``
    a line, each proof signed by that line's own key over :func:`key_binding`."""
    return "".join(
        f"{k.key_id} {base64.b64encode(k.public_raw).decode('ascii')} "
        f"{k.sign(key_binding(node=node, key_id=k.key_id), domain=KEY_BINDING_DOMAIN)}\n" for k in keys)


def parse_key_record(text: object) -> tuple[PublicKey, ...]:
    """Parse an untrusted key record into :class:`PublicKey` lines, signing key first. Checks the
    form only; :func:`verify_key_record` also checks the proofs.

    Raises:
        KeyRecordError: (a ValueError) ``bad_key_record``: not a str, over
            :data:`MAX_RECORD_BYTES`, no key, more than :data:`MAX_KEYS_PER_NODE`, a line that is not
            ``<32 hex> <base64 of 32 bytes> <proof>``, a key id that is not the key's own
            (:func:`key_id_of`), or a duplicate; ``bad_key_proof``: a line without a proof, or
            one that is not 128 lower-case hex characters.
    """
    if not isinstance(text, str):
        raise KeyRecordError("key record must be text")
    if len(text.encode("utf-8", "replace")) > MAX_RECORD_BYTES:
        raise KeyRecordError(f"key record over {MAX_RECORD_BYTES} bytes")
    out: list[PublicKey] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) not in (2, 3) or not _KEY_ID.fullmatch(parts[0]):
            raise KeyRecordError("each key line must be '<32 hex key id> <base64 key> <128 hex proof>'")
        try:
            raw = base64.b64decode(parts[1], validate=True)
        except (binascii.Error, ValueError):
            raise KeyRecordError(f"key {parts[0]}: not base64") from None
        if len(raw) != 32:
            raise KeyRecordError(f"key {parts[0]}: {len(raw)} bytes, an Ed25519 public key is 32")
        if key_id_of(raw) != parts[0]:
            raise KeyRecordError(f"key {parts[0]}: the id is not the key's own")
        if len(parts) == 2:
            raise KeyRecordError(f"key {parts[0]}: no proof of possession", reason=BAD_KEY_PROOF)
        if not _SIG.fullmatch(parts[2]):
            raise KeyRecordError(f"key {parts[0]}: the proof of possession is not 128 lower-case hex characters",
                                 reason=BAD_KEY_PROOF)
        if any(k.key_id == parts[0] for k in out):
            raise KeyRecordError(f"key {parts[0]}: listed twice")
        out.append(PublicKey(parts[0], raw, parts[2]))
    if not out:
        raise KeyRecordError("key record has no key")
    if len(out) > MAX_KEYS_PER_NODE:
        raise KeyRecordError(f"key record has {len(out)} keys; at most {MAX_KEYS_PER_NODE}")
    return tuple(out)


def verify_key_record(*, node: str, text: object) -> tuple[tuple[str, Ed25519PublicKey], ...]:
    """``node``'s untrusted key record as ``((key id, public key), ...)``, signing key first, once
    every line's proof verifies with that line's own key over ``node``'s name
    (:func:`key_binding`). A line copied from another node's record carries a proof over that
    node's name, so it fails here.

    Raises:
        KeyRecordError: as :func:`parse_key_record`; ``bad_key_record`` for a bad node name;
            ``bad_key_proof`` for a proof that does not verify.
    """
    if not is_node_name(node):
        raise KeyRecordError("not a node name")
    prefix = check_domain(KEY_BINDING_DOMAIN)
    out: list[tuple[str, Ed25519PublicKey]] = []
    for line in parse_key_record(text):
        try:
            public = Ed25519PublicKey.from_public_bytes(line.public_raw)
            public.verify(bytes.fromhex(line.proof), prefix + key_binding(node=node, key_id=line.key_id))
        except (InvalidSignature, ValueError):
            raise KeyRecordError(f"key {line.key_id}: its proof of possession does not verify for {node} (a key "
                                 "copied from another node's record?)", reason=BAD_KEY_PROOF) from None
        out.append((line.key_id, public))
    return tuple(out)


class PublicKeys:
    """The published keys of the nodes: ``node -> keys`` and ``key id -> node``. Single-threaded.

    A key counts for a node only with its proof of possession over that node's name
    (:func:`verify_key_record`), so no node can claim another's key, in any read order. A key id
    proven by two nodes (its private key was copied) is refused for the later one: :meth:`update`
    raises and keeps the earlier owner.

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
            KeyRecordError: (a ValueError; ``reason`` is the metric label) a bad record or node
                name, a proof that does not verify (:func:`verify_key_record`), or a key id already
                owned by another node (``key_conflict``). The node's keys stay as they were.
        """
        return self._set(node, verify_key_record(node=node, text=record))

    def add_own(self, node: NodeName, keys: Iterable[NodeKey]) -> None:
        """Register this node's own keys (held here, so no proof to check).

        Raises:
            KeyRecordError: a bad node name, no key, or a key another node already published.
        """
        own = tuple((k.key_id, Ed25519PublicKey.from_public_bytes(k.public_raw)) for k in keys)
        if not is_node_name(node) or not own:
            raise KeyRecordError("not a node name" if own else "no key")
        self._set(node, own)

    def _set(self, node: NodeName, keys: tuple[tuple[str, Ed25519PublicKey], ...]) -> bool:
        for key_id, _ in keys:
            held = self._by_id.get(key_id)
            if held is not None and held[0] != node:
                raise KeyRecordError(f"key {key_id} is already published by {held[0]}", reason=KEY_CONFLICT)
        ids = tuple(k for k, _ in keys)
        if self._by_node.get(node) == ids:
            return False
        self.remove(node)
        for key_id, public in keys:
            self._by_id[key_id] = (node, public)
        self._by_node[node] = ids
        return True

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

    def identity_keys(self, node: NodeName) -> dict[str, Ed25519PublicKey]:
        """``node``'s published keys by key id (empty if none): what verifies a record it signed
        (its exchange key's, :mod:`edgewatch.core.pairkey`)."""
        return {key_id: self._by_id[key_id][1] for key_id in self._by_node.get(node, ())}

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

    __slots__ = ("_keys", "_record", "node", "public")

    def __init__(self, *, node: NodeName, keys: Iterable[NodeKey], public: PublicKeys | None = None) -> None:
        self._keys = tuple(keys)
        if not self._keys:
            raise ValueError("a node keyring needs at least one key")
        self.node = node
        self.public = public if public is not None else PublicKeys()
        self.public.add_own(node, self._keys)
        self._record = format_key_record(self._keys, node=node)

    @property
    def primary_key_id(self) -> str:
        """Id of the key that signs."""
        return self._keys[0].key_id

    @property
    def own_keys(self) -> tuple[NodeKey, ...]:
        """This node's keys, signing key first."""
        return self._keys

    def record(self) -> str:
        """This node's key record (what it publishes), each line with its proof of possession."""
        return self._record

    def owner(self, key_id: object) -> NodeName | None:
        """The node that published ``key_id``, or None if unknown."""
        return self.public.owner(key_id)

    def keys_of(self, node: NodeName | str) -> tuple[str, ...]:
        """Ids of ``node``'s published keys (this node's own included); empty if unknown."""
        return self.public.keys_of(node)  # type: ignore[arg-type]

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

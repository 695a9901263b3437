"""The agent's exchange keys (peer protocol v6's pair keys): published beside the key record,
kept for a peer only when one of that peer's own keys signed it for that peer's name, saved with
the state, forgotten with the record. The attacks are one compromised member (its own Ed25519
key): it signs an exchange key in another node's name, or republishes another node's record under
its own name; their records are built here by hand (base64, canonical JSON, raw Ed25519), not with
the formatter under test."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from lightkube.resources.core_v1 import ConfigMap

from _events import Recorded
from _fakekube import FakeKube

from edgewatch.agent.identity import IdentityKeeper
from edgewatch.core.identity import NodeKey, NodeKeyring, PublicKeys
from edgewatch.core.pairkey import ExchangeKey, format_exchange_record
from edgewatch.core.types import NodeName
from edgewatch.names import EXCHANGE_KEY_RECORD_KEY, IDENTITY_NAMESPACE, KEY_RECORD_KEY

ME, OWNER, ATTACKER = NodeName("a-4"), NodeName("a-2"), NodeName("a-1")


def _node(name: NodeName) -> tuple[NodeKeyring, NodeKey, ExchangeKey]:
    key = NodeKey.generate()
    return NodeKeyring(node=name, keys=(key,), public=PublicKeys()), key, ExchangeKey.derived_from(key)


def _keeper(tmp_path: Path, *, client: object = None) -> tuple[IdentityKeeper, Recorded, ExchangeKey]:
    me, key, exchange = _node(ME)
    recorded = Recorded()
    keeper = IdentityKeeper(client=client, keyring=me, state_dir=tmp_path, events=recorded,  # type: ignore[arg-type]
                            exchange_key=exchange, retry_s=0.01)
    return keeper, recorded, exchange


def _forged_record(*, signer: Ed25519PrivateKey, for_node: str, public_raw: bytes) -> str:
    """What the attacker writes: its own key signs a binding of ``public_raw`` to ``for_node``."""
    signer_raw = signer.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    import hashlib
    key_id = hashlib.sha256(signer_raw).hexdigest()[:32]
    b64 = base64.b64encode(public_raw).decode()
    binding = json.dumps({"exchange_key": b64, "node": for_node}, sort_keys=True, separators=(",", ":")).encode()
    signature = signer.sign(b"edgewatch/exchange-key/v1\x00" + binding).hex()
    return f"{b64} {key_id} {signature}\n"


def test_a_peers_exchange_key_is_kept_only_when_its_own_key_signed_it(tmp_path: Path) -> None:
    keeper, recorded, _ = _keeper(tmp_path)
    owner, owner_key, owner_exchange = _node(OWNER)
    genuine = format_exchange_record(owner_exchange, identity=owner_key, node=OWNER)
    assert keeper.apply(OWNER, owner.record(), genuine)
    assert keeper.exchange_key_of(OWNER) == owner_exchange.public_raw
    assert recorded.key_refusals == []


def test_an_exchange_key_signed_by_another_member_in_the_owners_name_is_refused(tmp_path: Path) -> None:
    keeper, recorded, _ = _keeper(tmp_path)
    owner, _, _ = _node(OWNER)
    attacker_key = Ed25519PrivateKey.generate()
    attacker_x = X25519PrivateKey.generate().public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    forged = _forged_record(signer=attacker_key, for_node=OWNER, public_raw=attacker_x)
    # the owner's own object cannot be written by the attacker (the apiserver's policy); the forged
    # record reaches readers only if an exchange key were taken without its node's signature
    assert keeper.apply(OWNER, owner.record(), forged)  # the key record itself is fine
    assert keeper.exchange_key_of(OWNER) is None
    assert recorded.key_refusals == ["bad_exchange_key"]


def test_another_nodes_exchange_record_copied_under_the_attackers_name_is_refused(tmp_path: Path) -> None:
    keeper, recorded, _ = _keeper(tmp_path)
    owner, owner_key, owner_exchange = _node(OWNER)
    attacker, _, _ = _node(ATTACKER)
    published = format_exchange_record(owner_exchange, identity=owner_key, node=OWNER)  # read from the cloud
    assert keeper.apply(ATTACKER, attacker.record(), published)
    assert keeper.exchange_key_of(ATTACKER) is None
    # its own key over the owner's exchange key, in its own name: a valid binding, but the pair
    # keys mix in both names, so it derives nothing of the real pair (edgewatch.core.pairkey)
    attacker_key = Ed25519PrivateKey.generate()
    attacker2 = NodeKeyring(node=NodeName("a-5"), keys=(NodeKey(attacker_key),), public=PublicKeys())
    copied = _forged_record(signer=attacker_key, for_node="a-5", public_raw=owner_exchange.public_raw)
    assert keeper.apply(NodeName("a-5"), attacker2.record(), copied)
    assert keeper.exchange_key_of(NodeName("a-5")) == owner_exchange.public_raw
    assert recorded.key_refusals == ["bad_exchange_key"]


def test_malformed_missing_and_deleted_records_leave_no_key(tmp_path: Path) -> None:
    keeper, recorded, _ = _keeper(tmp_path)
    owner, owner_key, owner_exchange = _node(OWNER)
    for bad in ("", "x" * 300, "AAAA 00 00\n", 7):
        assert keeper.apply(OWNER, owner.record(), bad)  # type: ignore[arg-type]
        assert keeper.exchange_key_of(OWNER) is None
    assert len(recorded.key_refusals) >= 1 and set(recorded.key_refusals) == {"bad_exchange_key"}
    genuine = format_exchange_record(owner_exchange, identity=owner_key, node=OWNER)
    assert keeper.apply(OWNER, owner.record(), genuine) and keeper.exchange_key_of(OWNER) is not None
    assert keeper.apply(OWNER, owner.record(), None) and keeper.exchange_key_of(OWNER) is None  # an older agent
    assert keeper.apply(OWNER, owner.record(), genuine) and keeper.exchange_key_of(OWNER) is not None
    assert keeper.apply(OWNER, None) and keeper.exchange_key_of(OWNER) is None  # deleted
    assert json.loads((tmp_path / "exchange-keys.json").read_text()) == {}


def test_a_restarted_agent_knows_the_exchange_keys_it_had(tmp_path: Path) -> None:
    keeper, _, _ = _keeper(tmp_path)
    owner, owner_key, owner_exchange = _node(OWNER)
    keeper.apply(OWNER, owner.record(), format_exchange_record(owner_exchange, identity=owner_key, node=OWNER))
    again, recorded, _ = _keeper(tmp_path)
    assert again.exchange_key_of(OWNER) == owner_exchange.public_raw and recorded.key_refusals == []
    # the older agent's file is as it was: node -> key record
    assert json.loads((tmp_path / "public-keys.json").read_text()) == {OWNER: owner.record()}


async def test_the_agent_publishes_its_exchange_key_beside_its_keys(tmp_path: Path) -> None:
    kube = FakeKube()
    keeper, _, exchange = _keeper(tmp_path, client=kube)
    task = asyncio.create_task(keeper.run())
    try:
        async with asyncio.timeout(3):
            while not keeper.published.is_set():
                await asyncio.sleep(0.01)
        data = kube.obj("ConfigMap", ME, IDENTITY_NAMESPACE)["data"]
        assert data[KEY_RECORD_KEY] == keeper.keyring.record()
        b64, key_id, _signature = data[EXCHANGE_KEY_RECORD_KEY].split()
        assert base64.b64decode(b64) == exchange.public_raw and key_id == keeper.keyring.primary_key_id
        # an older agent's object (keys only) is completed, not replaced
        await kube.delete(ConfigMap, ME, namespace=IDENTITY_NAMESPACE)
        kube.put("ConfigMap", {"metadata": {"name": ME, "namespace": IDENTITY_NAMESPACE},
                               "data": {KEY_RECORD_KEY: keeper.keyring.record(), "note": "kept"}})
        async with asyncio.timeout(3):
            while EXCHANGE_KEY_RECORD_KEY not in kube.obj("ConfigMap", ME, IDENTITY_NAMESPACE)["data"]:
                await asyncio.sleep(0.01)
        assert kube.obj("ConfigMap", ME, IDENTITY_NAMESPACE)["data"]["note"] == "kept"
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def test_a_low_order_or_non_canonical_exchange_key_is_refused_when_read(tmp_path: Path) -> None:
    """A member publishing a low-order point (every shared secret zero) or its key in a second
    base64 spelling (to make every reader rewrite its state) is refused once, when read."""
    keeper, recorded, _ = _keeper(tmp_path)
    attacker_key = Ed25519PrivateKey.generate()
    attacker = NodeKeyring(node=ATTACKER, keys=(NodeKey(attacker_key),), public=PublicKeys())
    low_order = bytes(32)  # u = 0
    assert keeper.apply(ATTACKER, attacker.record(),
                        _forged_record(signer=attacker_key, for_node=ATTACKER, public_raw=low_order))
    assert keeper.exchange_key_of(ATTACKER) is None
    good = X25519PrivateKey.generate().public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    record = _forged_record(signer=attacker_key, for_node=ATTACKER, public_raw=good)
    b64 = record.split()[0]
    # the last character carries 4 unused bits: set one and the same 32 bytes decode
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    last = alphabet.index(b64[-2])
    respelled = b64[:-2] + alphabet[last | 1 if last % 2 == 0 else last & ~1] + "="
    assert base64.b64decode(respelled) == good and respelled != b64
    assert keeper.apply(ATTACKER, attacker.record(), record.replace(b64, respelled))
    assert keeper.exchange_key_of(ATTACKER) is None
    assert recorded.key_refusals == ["bad_exchange_key", "bad_exchange_key"]
    assert keeper.apply(ATTACKER, attacker.record(), record) and keeper.exchange_key_of(ATTACKER) == good

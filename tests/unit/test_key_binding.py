"""Keys bound to their owner by proof of possession (attack "key squatting", docs/security.md).

A compromised node lists another node's public key in its own key record. Readers used to keep the
first-seen owner, so a fresh reader (a new controller leader, an agent without saved state) that
read the squatter's record first gave it the key and refused every message of the real owner. Each
key line now carries the key's own signature over the node's name: the squatter's line is refused
in every read order, the owner keeps its key, and the refusal is counted as ``bad_key_proof`` by
the core, the controller and the agent. Last, how the agent follows the records on the API.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lightkube.resources.core_v1 import ConfigMap

from _events import Recorded
from _fakekube import FakeKube

from edgewatch.agent.identity import IdentityKeeper
from edgewatch.controller.verified import VerifiedEdge
from edgewatch.core.evidence import encode_evidence
from edgewatch.core.identity import (
    BAD_KEY_PROOF,
    BAD_KEY_RECORD,
    KEY_BINDING_DOMAIN,
    KEY_CONFLICT,
    MAX_RECORD_BYTES,
    KeyRecordError,
    NodeKey,
    NodeKeyring,
    PublicKeys,
    format_key_record,
    key_binding,
    verify_key_record,
)
from edgewatch.core.types import NodeName
from edgewatch.core.wire import ReplayGuard, decode_envelope, encode_envelope, sign_heartbeat
from edgewatch.names import IDENTITY_NAMESPACE, KEY_RECORD_KEY

OWNER, SQUATTER, OTHER = NodeName("a-2"), NodeName("a-1"), NodeName("a-3")


def _b64(key: NodeKey) -> str:
    return base64.b64encode(key.public_raw).decode()


# How an attacker holding only the owner's *public* record can write the owner's key as its own.
FORGERIES: dict[str, Callable[[NodeKey, NodeKey], str]] = {
    # the owner's line copied verbatim: its proof is over the owner's name
    "copied": lambda victim, own: format_key_record([victim], node=OWNER),
    # the squatter signs the binding with its own key
    "signed by the squatter": lambda victim, own: (
        f"{victim.key_id} {_b64(victim)} "
        f"{own.sign(key_binding(node=SQUATTER, key_id=victim.key_id), domain=KEY_BINDING_DOMAIN)}\n"),
    # a well-formed proof that is not a signature at all
    "random proof": lambda victim, own: f"{victim.key_id} {_b64(victim)} {'7f' * 64}\n",
    # the record format of old, without a proof
    "no proof": lambda victim, own: f"{victim.key_id} {_b64(victim)}\n",
    # a proof over the right name and key id, under another signature domain
    "other domain": lambda victim, own: (
        f"{victim.key_id} {_b64(victim)} "
        f"{own.sign(key_binding(node=SQUATTER, key_id=victim.key_id), domain='edgewatch/heartbeat/v4')}\n"),
}


def squat_record(kind: str, *, own: NodeKey, victim: NodeKey, first: bool) -> str:
    """The squatter's record: its own key and the victim's, the victim's first or second."""
    mine = format_key_record([own], node=SQUATTER)
    stolen = FORGERIES[kind](victim, own)
    return stolen + mine if first else mine + stolen


@pytest.mark.parametrize("first", [False, True], ids=["second", "first"])
@pytest.mark.parametrize("kind", sorted(FORGERIES))
def test_a_squatted_key_is_refused_in_every_read_order(kind: str, first: bool) -> None:
    own, victim, other = NodeKey.generate(), NodeKey.generate(), NodeKey.generate()
    records = {SQUATTER: squat_record(kind, own=own, victim=victim, first=first),
               OWNER: format_key_record([victim], node=OWNER), OTHER: format_key_record([other], node=OTHER)}
    for order in itertools.permutations(records):
        public = PublicKeys()  # a fresh reader: a new controller leader, an agent without saved state
        refused: dict[NodeName, str] = {}
        for node in order:
            try:
                public.update(node, records[node])
            except KeyRecordError as exc:
                assert str(exc)
                refused[node] = exc.reason
        assert refused == {SQUATTER: BAD_KEY_PROOF}, order
        assert public.owner(victim.key_id) == OWNER and public.keys_of(OWNER) == (victim.key_id,)
        assert public.keys_of(SQUATTER) == () and public.owner(own.key_id) is None
        assert public.owner(other.key_id) == OTHER


def test_a_running_reader_keeps_the_squatters_previous_keys() -> None:
    """A reader that knew the squatter's honest record keeps it when the forged one comes."""
    own, victim = NodeKey.generate(), NodeKey.generate()
    public = PublicKeys()
    public.update(SQUATTER, format_key_record([own], node=SQUATTER))
    public.update(OWNER, format_key_record([victim], node=OWNER))
    with pytest.raises(KeyRecordError, match="proof of possession does not verify for a-1") as refused:
        public.update(SQUATTER, squat_record("copied", own=own, victim=victim, first=False))
    assert refused.value.reason == BAD_KEY_PROOF
    assert public.keys_of(SQUATTER) == (own.key_id,) and public.owner(victim.key_id) == OWNER


def test_rotation_keeps_working_and_an_old_key_cannot_be_squatted() -> None:
    old, new, own = NodeKey.generate(), NodeKey.generate(), NodeKey.generate()
    rotated = format_key_record([new, old], node=OWNER)  # what rotate_key_file's keys publish
    assert [k for k, _ in verify_key_record(node=OWNER, text=rotated)] == [new.key_id, old.key_id]
    squat = squat_record("copied", own=own, victim=old, first=False)
    for order in ((SQUATTER, OWNER), (OWNER, SQUATTER)):
        public = PublicKeys()
        for node in order:
            try:
                public.update(node, squat if node == SQUATTER else rotated)
            except KeyRecordError as exc:
                assert node == SQUATTER and exc.reason == BAD_KEY_PROOF
        assert public.keys_of(OWNER) == (new.key_id, old.key_id) and public.owner(old.key_id) == OWNER
    with pytest.raises(KeyRecordError, match="does not verify for a-1"):  # a rotated record moved to another node
        verify_key_record(node=SQUATTER, text=rotated)


def test_a_proof_binds_one_node_and_one_key() -> None:
    a, b = NodeKey.generate(), NodeKey.generate()
    good = format_key_record([a], node=OWNER)
    verify_key_record(node=OWNER, text=good)
    proof_over_b = a.sign(key_binding(node=OWNER, key_id=b.key_id), domain=KEY_BINDING_DOMAIN)
    proof_by_b = b.sign(key_binding(node=OWNER, key_id=a.key_id), domain=KEY_BINDING_DOMAIN)
    for node, text in [(SQUATTER, good),  # a-2's line read as a-1's
                       (OWNER, f"{a.key_id} {_b64(a)} {proof_over_b}\n"),  # a's signature over b's id
                       (OWNER, f"{a.key_id} {_b64(a)} {proof_by_b}\n")]:  # b's signature over a's id
        with pytest.raises(KeyRecordError, match="does not verify") as refused:
            verify_key_record(node=node, text=text)
        assert refused.value.reason == BAD_KEY_PROOF


@pytest.mark.parametrize(("proof", "match", "reason"), [
    ("", "no proof of possession", BAD_KEY_PROOF),
    ("0" * 127, "not 128 lower-case hex", BAD_KEY_PROOF),
    ("0" * 129, "not 128 lower-case hex", BAD_KEY_PROOF),
    ("0" * 256, "not 128 lower-case hex", BAD_KEY_PROOF),
    ("g" * 128, "not 128 lower-case hex", BAD_KEY_PROOF),
    ("é" * 128, "not 128 lower-case hex", BAD_KEY_PROOF),
    ("0" * 128, "does not verify", BAD_KEY_PROOF),
    ("0" * MAX_RECORD_BYTES, "over", BAD_KEY_RECORD),
    ("0" * 128 + " 00", "each key line", BAD_KEY_RECORD),
])
def test_malformed_and_oversized_proofs_are_refused_with_a_clear_error(proof: str, match: str, reason: str) -> None:
    key = NodeKey.generate()
    public = PublicKeys()
    public.update(OWNER, format_key_record([key], node=OWNER))
    with pytest.raises(KeyRecordError, match=match) as refused:
        public.update(OWNER, f"{key.key_id} {_b64(key)} {proof}\n")
    assert refused.value.reason == reason
    assert public.keys_of(OWNER) == (key.key_id,)  # the previous keys stay


def test_bad_node_names_and_own_keys() -> None:
    key = NodeKey.generate()
    with pytest.raises(KeyRecordError, match="not a node name"):
        PublicKeys().update(NodeName("Not_A_Node"), format_key_record([key], node=OWNER))
    with pytest.raises(KeyRecordError, match="not a node name"):
        PublicKeys().add_own(NodeName(""), [key])
    public = PublicKeys()
    public.add_own(OWNER, [key])  # our own keys: no proof to check
    with pytest.raises(KeyRecordError) as refused:
        public.add_own(SQUATTER, [key])
    assert refused.value.reason == KEY_CONFLICT


# --------------------------------------------------------------------------- properties


@st.composite
def squats(draw: st.DrawFn) -> tuple[list[NodeName], dict[NodeName, list[NodeKey]], dict[NodeName, str], NodeName]:
    """A group of 3-6 nodes (some mid-rotation), one squatter copying or forging a victim's keys in
    its own record, and an order in which a fresh reader reads the records."""
    n = draw(st.integers(3, 6))
    nodes = [NodeName(f"n-{i}") for i in range(n)]
    keys = {node: [NodeKey.generate() for _ in range(draw(st.integers(1, 2)))] for node in nodes}
    squatter = draw(st.sampled_from(nodes))
    victim = draw(st.sampled_from([x for x in nodes if x != squatter]))
    stolen = draw(st.sampled_from(keys[victim]))
    kind = draw(st.sampled_from(sorted(FORGERIES)))
    line = FORGERIES[kind](stolen, keys[squatter][0])
    if kind == "copied":
        line = next(x + "\n" for x in format_key_record(keys[victim], node=victim).splitlines()
                    if x.startswith(stolen.key_id))
    mine = format_key_record(keys[squatter][:1], node=squatter)
    records = {node: format_key_record(keys[node], node=node) for node in nodes}
    records[squatter] = draw(st.sampled_from([line + mine, mine + line, line]))
    return draw(st.permutations(nodes)), keys, records, squatter


@settings(max_examples=150, deadline=None)
@given(squats())
def test_property_no_read_order_lets_a_squatter_take_a_key(
        case: tuple[list[NodeName], dict[NodeName, list[NodeKey]], dict[NodeName, str], NodeName]) -> None:
    order, keys, records, squatter = case
    public = PublicKeys()
    for node in order:
        try:
            public.update(node, records[node])
        except KeyRecordError as exc:
            assert node == squatter and exc.reason == BAD_KEY_PROOF, (node, exc)
    for node, held in keys.items():
        if node != squatter:
            assert public.keys_of(node) == tuple(k.key_id for k in held)
            assert all(public.owner(k.key_id) == node for k in held)
    assert public.keys_of(squatter) == ()


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_property_a_tampered_record_never_crashes_and_never_binds_a_key_elsewhere(data: st.DataObject) -> None:
    keys = [NodeKey.generate() for _ in range(data.draw(st.integers(1, 2)))]
    record = format_key_record(keys, node=OWNER)
    at = data.draw(st.integers(0, len(record) - 1))
    tampered = record[:at] + data.draw(st.text(min_size=0, max_size=3)) + record[at + data.draw(st.integers(0, 3)):]
    node = data.draw(st.sampled_from([OWNER, SQUATTER]))
    public = PublicKeys()
    try:
        public.update(node, tampered)
    except KeyRecordError as exc:
        assert str(exc) and exc.reason in (BAD_KEY_RECORD, BAD_KEY_PROOF)
        assert public.keys_of(node) == ()
        return
    assert node == OWNER  # only the owner's own proofs verify, and only for its own keys
    assert set(public.keys_of(OWNER)) <= {k.key_id for k in keys}


# --------------------------------------------------------------------------- readers


def _owner_and_squat() -> tuple[NodeKeyring, NodeKeyring, str]:
    owner = NodeKeyring(node=OWNER, keys=(NodeKey.generate(),), public=PublicKeys())
    squatter = NodeKeyring(node=SQUATTER, keys=(NodeKey.generate(),), public=PublicKeys())
    return owner, squatter, squatter.record() + owner.record()  # the owner's line copied verbatim


@pytest.mark.parametrize("squat_first", [True, False])
def test_a_fresh_controller_counts_the_owners_statements(squat_first: bool) -> None:
    owner, squatter, squat = _owner_and_squat()
    results: list[str] = []
    edge = VerifiedEdge(on_result=results.append)
    reads = [(SQUATTER, squat), (OWNER, owner.record())]
    for node, record in reads if squat_first else reads[::-1]:
        edge.apply_keys(node, record)
    assert results == [BAD_KEY_PROOF]
    edge.beacons.record("1" * 32, at=1.0)
    statement = sign_heartbeat(origin=OWNER, incarnation=1, seq=1, kubelet_ok=True, cloud_ok=True, alive=[OWNER],
                               dead=[], keyring=owner, beacon="1" * 32)
    assert edge.apply_evidence(OWNER, encode_evidence(statement)) == ["new"]  # not sender_mismatch


@pytest.mark.parametrize("squat_first", [True, False])
def test_a_fresh_agent_accepts_the_owners_messages(squat_first: bool, tmp_path: Path) -> None:
    owner, squatter, squat = _owner_and_squat()
    me = NodeKeyring(node=OTHER, keys=(NodeKey.generate(),), public=PublicKeys())
    recorded = Recorded()
    rejected = recorded.key_refusals
    keeper = IdentityKeeper(client=None, keyring=me, state_dir=tmp_path, events=recorded)  # type: ignore[arg-type]
    reads = [(SQUATTER, squat), (OWNER, owner.record())]
    for node, record in reads if squat_first else reads[::-1]:
        keeper.apply(node, record)
    assert rejected == [BAD_KEY_PROOF]
    assert me.owner(owner.primary_key_id) == OWNER and me.owner(squatter.primary_key_id) is None
    own = sign_heartbeat(origin=OWNER, incarnation=1, seq=1, kubelet_ok=True, cloud_ok=True, alive=[OWNER],
                         dead=[], keyring=owner)
    raw = encode_envelope(sender=OWNER, receiver=OTHER, epoch=1, seq=1, nonce="0" * 32, own=own, keyring=owner)
    assert decode_envelope(raw, keyring=me, receiver=OTHER, max_bytes=65_536, guard=ReplayGuard()).sender == OWNER
    saved = json.loads((tmp_path / "public-keys.json").read_text())
    assert saved == {OWNER: owner.record()}  # the refused record is not kept


def test_a_squat_in_saved_state_is_refused_at_start(tmp_path: Path) -> None:
    owner, _, squat = _owner_and_squat()
    (tmp_path / "public-keys.json").write_text(json.dumps({SQUATTER: squat, OWNER: owner.record()}))
    me = NodeKeyring(node=OTHER, keys=(NodeKey.generate(),), public=PublicKeys())
    recorded = Recorded()
    rejected = recorded.key_refusals
    IdentityKeeper(client=None, keyring=me, state_dir=tmp_path, events=recorded)  # type: ignore[arg-type]
    assert rejected == [BAD_KEY_PROOF] and me.owner(owner.primary_key_id) == OWNER


async def _wait(predicate: Callable[[], bool], timeout_s: float = 3.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.01)


async def test_an_agent_follows_the_records_and_forgets_those_deleted_while_it_was_away(tmp_path: Path) -> None:
    owner, _, squat = _owner_and_squat()
    other = NodeKeyring(node=OTHER, keys=(NodeKey.generate(),), public=PublicKeys())
    me = NodeKeyring(node=NodeName("a-4"), keys=(NodeKey.generate(),), public=PublicKeys())
    (tmp_path / "public-keys.json").write_text(json.dumps({OTHER: other.record()}))  # known before a restart
    kube = FakeKube()

    def publish(node: NodeName, record: str) -> None:
        kube.put("ConfigMap", {"metadata": {"name": node, "namespace": IDENTITY_NAMESPACE},
                               "data": {KEY_RECORD_KEY: record}})

    publish(OWNER, owner.record())
    # every namespace gets kube-controller-manager's kube-root-ca.crt: no key record, no refusal
    kube.put("ConfigMap", {"metadata": {"name": "kube-root-ca.crt", "namespace": IDENTITY_NAMESPACE},
                           "data": {"ca.crt": "-----BEGIN CERTIFICATE-----"}})
    recorded = Recorded()
    keeper = IdentityKeeper(client=kube, keyring=me, state_dir=tmp_path, retry_s=0.01,  # type: ignore[arg-type]
                            events=recorded)
    assert me.owner(other.primary_key_id) == OTHER  # from the state folder
    task = asyncio.create_task(keeper.run())
    try:
        # the first list: the owner's record adopted, OTHER's (deleted meanwhile) forgotten, ours published
        await _wait(lambda: keeper.published.is_set() and me.owner(owner.primary_key_id) == OWNER
                    and me.owner(other.primary_key_id) is None)
        assert kube.obj("ConfigMap", me.node, IDENTITY_NAMESPACE)["data"] == {KEY_RECORD_KEY: me.record()}
        await asyncio.sleep(0.05)  # our own record's creation may still come back as a watch event
        before = len(recorded.watch_events)
        publish(SQUATTER, squat)  # refused, counted
        await _wait(lambda: recorded.key_refusals == [BAD_KEY_PROOF])
        await kube.delete(ConfigMap, OWNER, namespace=IDENTITY_NAMESPACE)
        await _wait(lambda: me.owner(owner.primary_key_id) is None)
        assert recorded.watch_events[before:] == ["keys", "keys"]
        assert json.loads((tmp_path / "public-keys.json").read_text()) == {}
        await kube.delete(ConfigMap, me.node, namespace=IDENTITY_NAMESPACE)  # ours deleted: published again
        await _wait(lambda: kube.objects.get(("ConfigMap", IDENTITY_NAMESPACE, me.node)) is not None)
        assert kube.obj("ConfigMap", me.node, IDENTITY_NAMESPACE)["data"] == {KEY_RECORD_KEY: me.record()}
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def test_the_controller_takes_a_configmap_without_a_key_record_as_no_keys_not_a_refusal() -> None:
    """kube-root-ca.crt is in the identity namespace as in every namespace; it once counted as a
    bad_key_record at every controller start (EdgewatchEvidenceRefused fired in every lab run)."""
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.core_v1 import ConfigMap as LkConfigMap

    from edgewatch.controller.evidence import EvidenceInformer
    from edgewatch.controller.verified import VerifiedEdge

    results: list[str] = []
    verified = VerifiedEdge(on_result=results.append)
    informer = EvidenceInformer(client=None, verified=verified, clock=lambda: 0.0,  # type: ignore[arg-type]
                                on_change=lambda _n: None)
    informer.on_keys("ADDED", LkConfigMap(metadata=ObjectMeta(name="kube-root-ca.crt", namespace=IDENTITY_NAMESPACE),
                                          data={"ca.crt": "-----BEGIN CERTIFICATE-----"}))
    owner = NodeKeyring(node=OWNER, keys=(NodeKey.generate(),), public=PublicKeys())
    informer.on_keys("ADDED", LkConfigMap(metadata=ObjectMeta(name=OWNER, namespace=IDENTITY_NAMESPACE),
                                          data={KEY_RECORD_KEY: owner.record()}))
    informer.on_keys("MODIFIED", LkConfigMap(metadata=ObjectMeta(name=OWNER, namespace=IDENTITY_NAMESPACE),
                                             data={KEY_RECORD_KEY: "not a record"}))
    assert results == ["bad_key_record"]  # only the real bad record
    assert verified.keys.keys_of(OWNER) == (owner.primary_key_id,)  # its previous keys stay

"""Across releases, for real: release 0.1.0's own code (protocol v4, ``git archive`` of the commit
CHANGELOG.md names, run in a subprocess) and this checkout's (v5, reads v4) exchange envelopes and
evidence signed with the same keys, both ways (docs/versions.md).

* 0.1.0 encodes a request envelope and its evidence; this checkout decodes them (v4, range (4, 4)),
  counts the evidence like its own, and negotiates v4 for that peer;
* this checkout answers in v4 and writes its evidence at N-1; 0.1.0 decodes both;
* 0.1.0 refuses this checkout's v5 envelope as ``malformed`` (which is what makes an upgraded
  agent fall back to v4 for that peer in the same probe).

The extracted tree lives in a temporary directory removed at the end; the test never skips (git
and the commit are part of this repository).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from edgewatch.core.evidence import EvidenceBook, decode_evidence, encode_evidence, verified_decisions
from edgewatch.core.identity import NodeKeyring, PublicKeys, format_key_record, load_or_create_key_file
from edgewatch.core.types import NodeName
from edgewatch.core.versions import PeerVersions
from edgewatch.core.wire import ReplayGuard, decode_envelope, encode_envelope, sign_heartbeat

RELEASE_0_1_0 = "fae0b3b790ba1368f93e5ca00ba528d2aad700d7"
"""The commit release 0.1.0 was cut from (CHANGELOG.md)."""

REPO = Path(__file__).resolve().parents[2]
NODES = ("node-a", "node-b", "node-c")
BEACON = "cd" * 16
EPOCH = 1_700_000_000_000_000_000

_OLD_SIDE = r'''
import json, sys
from pathlib import Path
import edgewatch
assert edgewatch.__file__.startswith(sys.argv[1]), edgewatch.__file__  # 0.1.0's code, not ours
from edgewatch.core.evidence import decode_evidence, encode_evidence
from edgewatch.core.identity import NodeKeyring, PublicKeys, format_key_record, load_or_create_key_file
from edgewatch.core.types import NodeName
from edgewatch.core.wire import PROTOCOL_VERSION, Rejected, ReplayGuard, decode_envelope, encode_envelope, sign_heartbeat

keys_dir = Path(sys.argv[2])
public = PublicKeys()
keys = {}
for name in ("node-a", "node-b", "node-c"):
    keys[name] = load_or_create_key_file(keys_dir / name)
    public.update(NodeName(name), format_key_record(keys[name], node=NodeName(name)))
ring = {n: NodeKeyring(node=NodeName(n), keys=k, public=public) for n, k in keys.items()}
request = json.load(sys.stdin)
out = {"protocol_version": PROTOCOL_VERSION}
if request["mode"] == "encode":
    own = sign_heartbeat(origin=NodeName("node-a"), incarnation=7, seq=3, kubelet_ok=True, cloud_ok=False,
                         alive=[NodeName("node-a"), NodeName("node-b")], dead=[NodeName("node-c")],
                         keyring=ring["node-a"], beacon=request["beacon"], carrier="node-b")
    carried = sign_heartbeat(origin=NodeName("node-c"), incarnation=1, seq=9, kubelet_ok=False, cloud_ok=False,
                             alive=[], dead=[NodeName("node-c")], keyring=ring["node-c"], beacon=request["beacon"])
    out["envelope"] = encode_envelope(sender=NodeName("node-a"), receiver=NodeName("node-b"), epoch=request["epoch"],
                                      seq=1, nonce=request["nonce"], own=own, relayed=[(carried, 2.5)],
                                      keyring=ring["node-a"]).hex()
    out["evidence"] = encode_evidence(own, [carried])
    out["statements"] = [own.to_wire(), carried.to_wire()]
else:
    for key in ("answer", "v5_request"):
        try:
            env = decode_envelope(bytes.fromhex(request[key]), keyring=ring["node-a"], receiver=NodeName("node-a"),
                                  max_bytes=65536, guard=ReplayGuard(), reply_to=request["reply_to"][key])
            out[key] = {"sender": env.sender, "own": env.own.to_wire(),
                        "relayed": [r.heartbeat.to_wire() for r in env.relayed if r.heartbeat is not None]}
        except Rejected as exc:
            out[key] = {"rejected": exc.reason.value, "detail": exc.detail}
    accepted, refused = decode_evidence(request["evidence"], writer=NodeName("node-b"), verifier=ring["node-a"])
    out["evidence"] = {"accepted": [hb.to_wire() for hb in accepted], "refused": [r.reason.value for r in refused]}
json.dump(out, sys.stdout)
'''


def _old(tree: Path, keys_dir: Path, request: dict[str, object]) -> dict[str, object]:
    """Run 0.1.0's code (PYTHONPATH=<its src>) on ``request``; its JSON answer."""
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    proc = subprocess.run([sys.executable, "-c", _OLD_SIDE, str(tree / "src"), str(keys_dir)],
                          input=json.dumps(request), capture_output=True, text=True, env=env, cwd=tree,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert isinstance(result, dict)
    return result


def _extract(into: Path) -> Path:
    tree = into / "ew-0.1.0"
    tree.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", RELEASE_0_1_0, "src"], capture_output=True,
                             check=True, timeout=120).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True, timeout=120)
    assert (tree / "src/edgewatch/core/wire.py").is_file()
    return tree


def test_release_0_1_0_and_this_checkout_understand_each_other() -> None:
    with tempfile.TemporaryDirectory(prefix="ew-0.1.0-") as tmp:
        root = Path(tmp)
        tree = _extract(root)
        keys_dir = root / "keys"
        keys_dir.mkdir()
        public = PublicKeys()
        keys = {}
        for name in NODES:
            keys[name] = load_or_create_key_file(keys_dir / name)
            public.update(NodeName(name), format_key_record(keys[name], node=NodeName(name)))
        ring = {n: NodeKeyring(node=NodeName(n), keys=k, public=public) for n, k in keys.items()}

        # 0.1.0 -> this checkout: its request envelope and its evidence.
        request_nonce = "1" * 32
        old = _old(tree, keys_dir, {"mode": "encode", "beacon": BEACON, "epoch": EPOCH, "nonce": request_nonce})
        assert old["protocol_version"] == 4
        raw = bytes.fromhex(str(old["envelope"]))
        assert raw.startswith(b"edgewatch-envelope/v4 ")
        env = decode_envelope(raw, keyring=ring["node-b"], receiver=NodeName("node-b"), max_bytes=65_536,
                              guard=ReplayGuard())
        assert (env.version, env.versions, env.sender) == (4, (4, 4), "node-a")
        assert [hb.to_wire() for hb in env.heartbeats] == old["statements"]
        table = PeerVersions()
        assert table.heard(env.sender, version=env.version, versions=env.versions) == 4
        assert table.version_for(env.sender) == 4

        accepted, refused = decode_evidence(old["evidence"], writer=NodeName("node-a"), verifier=ring["node-b"])
        assert not refused and [hb.to_wire() for hb in accepted] == old["statements"]
        book = EvidenceBook(beacon_time=lambda b: 50.0 if b == BEACON else None)
        assert [book.offer(hb, carrier=NodeName("node-a")) for hb in accepted] == ["new", "new"]
        decisions = verified_decisions(group=frozenset(map(NodeName, NODES)), votes=book.votes(), now=55.0,
                                       ttl_s=30.0)
        assert set(decisions) == set(NODES)
        assert decisions[NodeName("node-c")].verdict.value == "unhealthy"  # both voters see it dead

        # This checkout -> 0.1.0: the v4 answer, a v5 request (refused), and evidence at N-1.
        own_b = sign_heartbeat(origin=NodeName("node-b"), incarnation=5, seq=1, kubelet_ok=True, cloud_ok=True,
                               alive=[NodeName("node-a"), NodeName("node-b")], dead=[], keyring=ring["node-b"],
                               beacon=BEACON)
        answer = encode_envelope(sender=NodeName("node-b"), receiver=NodeName("node-a"), epoch=EPOCH + 1, seq=1,
                                 nonce="2" * 32, reply_to=env.nonce, own=own_b, relayed=[(env.own, 0.5)],
                                 keyring=ring["node-b"], version=table.version_for(env.sender))
        v5_request = encode_envelope(sender=NodeName("node-b"), receiver=NodeName("node-a"), epoch=EPOCH + 1,
                                     seq=2, nonce="3" * 32, own=own_b, keyring=ring["node-b"], version=5)
        evidence = encode_evidence(own_b, [env.own])
        back = _old(tree, keys_dir, {"mode": "decode", "answer": answer.hex(), "v5_request": v5_request.hex(),
                                     "evidence": evidence, "reply_to": {"answer": request_nonce, "v5_request": None}})
        assert back["answer"] == {"sender": "node-b", "own": own_b.to_wire(), "relayed": [env.own.to_wire()]}
        assert back["v5_request"]["rejected"] == "malformed"  # type: ignore[index]
        assert back["evidence"] == {"accepted": [own_b.to_wire(), env.own.to_wire()], "refused": []}
        assert table.refused(NodeName("node-a"), 5) == 4  # what the agent does on that refusal
    assert not root.exists()

"""Today's wire codec against msgspec, on a typical v4 envelope (the scaling work's "use a fast codec —
measure it against today's"; docs/scaling.md).

Per operation, microseconds of CPU (best of 5 runs of 2,000 each):

* ``canonical``: the canonical JSON a heartbeat is signed and verified over
  (``edgewatch.core.signing.canonical_json``: a strictness walk, then ``json.dumps``) against
  ``msgspec.json.Encoder(order="sorted")``;
* ``parse``: the envelope body's JSON (``json.loads`` with the duplicate-key and constant hooks
  the decoder uses) against ``msgspec.json.Decoder``;
* ``decode_envelope``: the whole strict decode (size, signature over the bytes, parse, schema,
  every heartbeat's signature — served by the verified-signature cache after the first time —
  and replay guard), for scale;
* ``ed25519_verify``: one signature check without the cache.

Usage: .venv/bin/python bench/codec.py   (prints one JSON line)
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import msgspec

from edgewatch.core.identity import NodeKey, NodeKeyring, PublicKeys
from edgewatch.core.signing import canonical_json
from edgewatch.core.types import NodeName
from edgewatch.core.wire import (
    HEARTBEAT_DOMAIN,
    ReplayGuard,
    parse_strict_json,
    decode_envelope,
    encode_envelope,
    sign_heartbeat,
)


def best_us(fn: Callable[[], object], *, runs: int = 5, n: int = 2000) -> float:
    best = float("inf")
    for _ in range(runs):
        t = time.process_time()
        for _ in range(n):
            fn()
        best = min(best, (time.process_time() - t) / n)
    return round(best * 1e6, 2)


def main() -> None:
    public = PublicKeys()
    names = [NodeName(f"edge-{i:04d}") for i in range(8)]
    rings = {m: NodeKeyring(node=m, keys=(NodeKey.generate(),), public=public) for m in names}
    a, b = names[0], names[1]
    hbs = [sign_heartbeat(origin=m, incarnation=1, seq=7, kubelet_ok=True, cloud_ok=True, alive=names[:7],
                          dead=[names[7]], keyring=rings[m], beacon="ab" * 16) for m in names[:3]]
    raw = encode_envelope(sender=a, receiver=b, epoch=1, seq=1, nonce="cd" * 16, own=hbs[0],
                          relayed=[(hbs[1], 0.5), (hbs[2], 1.5)], keyring=rings[a], max_bytes=65536)
    body = raw.split(b"\n", 1)[1]
    wire_hb = hbs[0].to_wire()
    unsigned = {k: v for k, v in wire_hb.items() if k != "mac"}
    encoder, decoder = msgspec.json.Encoder(order="sorted"), msgspec.json.Decoder()
    assert encoder.encode(unsigned) == canonical_json(unsigned)  # same bytes: a drop-in for signing
    seq = iter(range(2, 10**9))

    def decode() -> None:
        guard = ReplayGuard()
        decode_envelope(raw, keyring=rings[b], receiver=b, max_bytes=65536, guard=guard, heartbeat_max_age_s=30.0)

    key = public._by_id[rings[a].primary_key_id][1]  # noqa: SLF001 - the raw check, without the cache
    signed = HEARTBEAT_DOMAIN.encode() + b"\x00" + canonical_json(unsigned)
    sig = bytes.fromhex(wire_hb["mac"])  # type: ignore[arg-type]
    del seq
    out = {
        "envelope_bytes": len(raw),
        "canonical_today_us": best_us(lambda: canonical_json(unsigned)),
        "canonical_msgspec_us": best_us(lambda: encoder.encode(unsigned)),
        "parse_today_us": best_us(lambda: parse_strict_json(body)),
        "parse_msgspec_us": best_us(lambda: decoder.decode(body)),
        "parse_stdlib_plain_us": best_us(lambda: json.loads(body)),
        "decode_envelope_us": best_us(decode),
        "ed25519_verify_us": best_us(lambda: key.verify(sig, signed), n=500),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()

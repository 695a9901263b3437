"""Memory the agent's imports cost, step by step (the target: one agent <= 60 MiB RSS, docs/scaling.md).

What it is for
    Says where an agent process's memory goes before it does any work: the interpreter, each
    third-party package the agent's module tree pulls in, then the agent's own modules. A step's
    figure is what removing that package would save (if nothing else pulled it in), which is what
    the list of candidates in docs/scaling.md ("One agent's memory") is built from.

How
    One fresh interpreter imports a fixed sequence of steps (``STEPS``: the stdlib and the
    third-party floor first -- asyncio, ssl, aiohttp, cryptography, pydantic -- then the packages
    the agent could do without -- httpx2, msgspec, lightkube, grpc, protobuf, aetcd, ... --
    then edgewatch's modules up to ``edgewatch.agent.main`` and ``edgewatch.cli``, which is what
    the ``edgewatch agent`` process imports). After each step (``gc.collect()`` first) it reads
    ``/proc/self/smaps_rollup`` and prints the step's delta of Rss, Anonymous (the process's own
    heap: code objects, classes, pydantic/protobuf schemas, ...) and file-backed pages (Rss -
    Anonymous: extension modules and shared libraries as far as they were touched), the new
    modules and the time it took.

    ``--packages`` lists under each step the top-level packages it brought in. ``--alone`` adds,
    per step, its cost imported alone into a fresh interpreter (its whole dependency tree: an upper
    bound of what removing it saves; the in-order delta is the lower bound when it is imported
    late). ``--importtime`` prints the top cumulative entries of
    ``python -X importtime -c 'import edgewatch.cli, edgewatch.agent.main'``. ``--floor`` runs a
    minimal live process of the floor stack (asyncio + aiohttp server and client session with a
    TLS context + cryptography Ed25519 + pydantic + prometheus_client + yaml) for a few seconds
    and prints its memory, the smallest an agent built on that stack could be (``--floor-codec
    msgspec``: the same with msgspec.Struct models instead of pydantic).

Usage
    .venv/bin/python bench/agent_imports.py [--json] [--packages] [--alone] [--importtime [N]]
        [--floor [--floor-codec msgspec]] [--python-flag FLAG ...]
    --python-flag (e.g. -OO, -Xno_debug_ranges; one argument each) runs the steps under it;
    environment settings such as PYTHONMALLOC=malloc are inherited by every interpreter started.

Limits
    RSS counts shared library pages (file_mib): an agent's extension modules and libssl/libcrypto
    are shared with every other Python process on the node that maps the same files, but one agent
    per node pays them alone. Import order matters: a step's cost includes whatever it pulls in
    first (aiohttp's step carries http, email, yarl, multidict ...; lightkube's carries what httpx2
    and msgspec did not already bring; ssl reads 0 because asyncio imports it), so the in-order figure of a package is what removing it
    saves only if nothing later needs what it brought. Memory allocated by the agent at run time
    (event loop, TLS contexts with the CA bundle, caches, grpc's threads) is not here; see
    bench/agent_process.py for the running process. Anonymous also holds the relocated data of
    shared libraries (private to the process though file-backed). pymalloc grows in 1 MiB arenas, so small steps
    round to 0 or 1 MiB of Anonymous.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import proc_memory_mib, proc_threads  # noqa: E402  (this folder, see _measure)

STEPS: list[tuple[str, str]] = [
    # The stdlib an agent uses anyway.
    ("asyncio", "import asyncio"),
    ("ssl", "import ssl"),
    ("stdlib: json logging dataclasses ipaddress", "import json, logging, dataclasses, ipaddress, secrets, tempfile"),
    # The floor: what an agent on aiohttp + cryptography + pydantic cannot drop.
    ("aiohttp (client)", "import aiohttp"),
    ("aiohttp.web", "import aiohttp.web"),
    ("cryptography: ed25519 serialization", "from cryptography.hazmat.primitives.asymmetric import ed25519\n"
                                            "from cryptography.hazmat.primitives import serialization"),
    ("cryptography.x509 (pool cache TLS)", "import cryptography.x509"),
    ("pydantic: BaseModel", "from pydantic import BaseModel"),
    ("prometheus_client", "import prometheus_client"),
    ("yaml", "import yaml"),
    ("click", "import click"),
    # The second HTTP stack: the cloud API client.
    ("httpx2", "import httpx2"),
    ("msgspec", "import msgspec"),
    ("lightkube (AsyncClient, KubeConfig)", "from lightkube import AsyncClient, KubeConfig"),
    ("lightkube resources the agent uses", "from lightkube.resources.core_v1 import ConfigMap, Node, Event, Secret\n"
                                           "from lightkube.resources.coordination_v1 import Lease\n"
                                           "from lightkube.models.meta_v1 import ObjectMeta"),
    # The coordinator's etcd client.
    ("grpc", "import grpc"),
    ("google.protobuf", "import google.protobuf.message, google.protobuf.descriptor_pool"),
    ("aetcd", "import aetcd, aetcd.rpc, aetcd.watcher, aetcd.utils"),
    # Logging: the standard library's, with edgewatch.logs' two formatters (structlog and the rich
    # it imported cost 3.7 MiB here until 2026-11-28).
    # edgewatch's own modules, bottom up.
    ("edgewatch.core.wire", "import edgewatch.core.wire"),
    ("edgewatch.core (rest)", "import edgewatch.core.identity, edgewatch.core.roster, edgewatch.core.topology, "
                              "edgewatch.core.grouping, edgewatch.core.poolconfig, edgewatch.core.quorum"),
    ("edgewatch.kube, .runtime, .logs", "import edgewatch.kube.http, edgewatch.runtime, edgewatch.logs"),
    ("edgewatch.agent.coordinator", "import edgewatch.agent.coordinator"),
    ("edgewatch.poolcache.store/reflector", "import edgewatch.poolcache.store, edgewatch.poolcache.reflector"),
    ("edgewatch.poolcache.apiserver/authn/tls", "import edgewatch.poolcache.apiserver, edgewatch.poolcache.authn, "
                                                "edgewatch.poolcache.tls"),
    ("edgewatch.poolcache.sources/leader/etcdfeed", "import edgewatch.poolcache.sources, edgewatch.poolcache.leader, "
                                                    "edgewatch.poolcache.etcdfeed"),
    ("edgewatch.agent.agent", "import edgewatch.agent.agent"),
    ("edgewatch.agent.main", "import edgewatch.agent.main"),
    ("edgewatch.cli (what `edgewatch agent` runs)", "import edgewatch.cli"),
]


def _snapshot() -> dict[str, float]:
    gc.collect()
    return {**proc_memory_mib(), "modules": float(len(sys.modules))}


def run_steps(steps: list[tuple[str, str]]) -> list[dict[str, object]]:
    """Import ``steps`` in order in this interpreter; one row per step (first row: the bare
    interpreter with this script's own imports)."""
    prev = _snapshot()
    rows: list[dict[str, object]] = [{"step": "interpreter (+ gc, json, subprocess)", **_row(prev, None, 0.0)}]
    for label, code in steps:
        before = set(sys.modules)
        t0 = time.perf_counter()
        exec(compile(code, f"<step {label}>", "exec"), {})  # noqa: S102 - fixed import statements
        ms = (time.perf_counter() - t0) * 1000
        now = _snapshot()
        new = sorted({m.split(".")[0] for m in set(sys.modules) - before})
        rows.append({"step": label, **_row(now, prev, ms), "packages": new})
        prev = now
    return rows


def _row(now: dict[str, float], prev: dict[str, float] | None, ms: float) -> dict[str, object]:
    out: dict[str, object] = {k: round(now[k], 1) for k in ("rss_mib", "anon_mib", "file_mib")}
    if prev is not None:
        out.update({f"d_{k}": round(now[k] - prev[k], 1) for k in ("rss_mib", "anon_mib", "file_mib")})
        out["new_modules"] = int(now["modules"] - prev["modules"])
        out["ms"] = round(ms, 1)
    return out


def alone(label: str, flags: list[str]) -> dict[str, float]:
    """The step's cost imported alone in a fresh interpreter (its whole tree)."""
    out = subprocess.run([sys.executable, *flags, __file__, "--_one", label], check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out)


def _one(label: str) -> None:
    code = dict(STEPS)[label]
    before = _snapshot()
    exec(compile(code, f"<step {label}>", "exec"), {})  # noqa: S102
    after = _snapshot()
    print(json.dumps({k: round(after[k] - before[k], 1) for k in ("rss_mib", "anon_mib", "file_mib")}))


def importtime(top: int, flags: list[str]) -> list[tuple[int, int, str]]:
    """(cumulative us, self us, module) of the agent's imports, the ``top`` largest cumulative."""
    argv = [sys.executable, *flags, "-X", "importtime", "-c", "import edgewatch.cli, edgewatch.agent.main"]
    err = subprocess.run(argv, check=True, capture_output=True, text=True).stderr
    rows = []
    for line in err.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        self_us, cum_us, name = line.removeprefix("import time:").split("|", 2)
        rows.append((int(cum_us), int(self_us), name.rstrip()))
    return sorted(rows, reverse=True)[:top]


FLOOR = r'''
import asyncio, json, ssl, sys, gc
sys.path.insert(0, sys.argv[1])
CODEC = sys.argv[2]
from _measure import proc_memory_map_mib, proc_memory_mib, proc_threads
import aiohttp
from aiohttp import web
import yaml
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from prometheus_client import CollectorRegistry, Counter, generate_latest

if CODEC == "pydantic":
    from pydantic import BaseModel

    class Vote(BaseModel):
        node: str
        verdict: str
        seq: int

    decode, encode = Vote.model_validate_json, lambda v: v.model_dump_json().encode()
else:
    import msgspec

    class Vote(msgspec.Struct):
        node: str
        verdict: str
        seq: int

    decode, encode = (lambda b: msgspec.json.decode(b, type=Vote)), msgspec.json.encode

async def main():
    key = Ed25519PrivateKey.generate()
    registry = CollectorRegistry()
    hits = Counter("hits", "hits", registry=registry)
    async def handle(request):
        hits.inc()
        vote = decode(await request.read())
        return web.Response(body=key.sign(encode(vote)))
    async def metrics(_request):
        return web.Response(body=generate_latest(registry))
    app = web.Application()
    app.router.add_post("/x", handle)
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    tls = ssl.create_default_context()  # the system CA bundle, as a cloud client loads it
    yaml.safe_load("a: 1")
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=tls)) as session:
        for i in range(200):
            async with session.post(f"http://127.0.0.1:{port}/x", data=encode(Vote(node="n", verdict="healthy",
                                                                                      seq=i))) as r:
                await r.read()
            await asyncio.sleep(0.01)
        gc.collect()
        print(json.dumps({**{k: round(v, 1) for k, v in proc_memory_mib().items()},
                          "threads": proc_threads(), "modules": len(sys.modules),
                          "memory_map": proc_memory_map_mib(top=6)}))
    await runner.cleanup()

asyncio.run(main())
'''


def floor(flags: list[str], codec: str) -> dict[str, object]:
    out = subprocess.run([sys.executable, *flags, "-c", FLOOR, str(Path(__file__).resolve().parent), codec],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "Memory of the agent's imports").splitlines()[0])
    parser.add_argument("--json", action="store_true", help="one JSON line per step instead of a table")
    parser.add_argument("--alone", action="store_true", help="also each step alone in a fresh interpreter")
    parser.add_argument("--importtime", type=int, nargs="?", const=25, default=0, metavar="N",
                        help="also the top N (25) cumulative entries of -X importtime")
    parser.add_argument("--floor", action="store_true", help="also a minimal live asyncio+aiohttp+cryptography+"
                                                             "pydantic process")
    parser.add_argument("--floor-codec", choices=("pydantic", "msgspec"), default="pydantic",
                        help="the floor process's message models: pydantic (default) or msgspec.Struct")
    parser.add_argument("--packages", action="store_true", help="table: also the top-level packages each step "
                                                                 "brought in")
    parser.add_argument("--python-flag", action="append", default=[], metavar="FLAG",
                        help="interpreter flag for the measured interpreter(s), e.g. -OO (repeatable)")
    parser.add_argument("--_one", help=argparse.SUPPRESS)
    parser.add_argument("--_steps", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._one:
        _one(args._one)
        return
    if args._steps or not args.python_flag:
        rows = run_steps(STEPS)
        if args._steps:
            print(json.dumps(rows))
            return
    else:  # the steps under the given interpreter flags: in a child
        rows = json.loads(subprocess.run([sys.executable, *args.python_flag, __file__, "--_steps"], check=True,
                                         capture_output=True, text=True).stdout)
    if args.alone:
        for row in rows[1:]:
            one = alone(str(row["step"]), args.python_flag)
            row.update({f"alone_{k}": v for k, v in one.items()})
    if args.json:
        for row in rows:
            print(json.dumps(row))
    else:
        print(f"{'step':48} {'rss':>6} {'anon':>6} {'file':>6} | {'dRss':>6} {'dAnon':>6} {'dFile':>6} "
              f"{'mods':>5} {'ms':>6}" + (f" | {'alone Rss/Anon':>15}" if args.alone else ""))
        for row in rows:
            deltas = (f"{row['d_rss_mib']:6.1f} {row['d_anon_mib']:6.1f} {row['d_file_mib']:6.1f} "
                      f"{row['new_modules']:5d} {row['ms']:6.0f}") if "d_rss_mib" in row else " " * 38
            extra = f" | {row['alone_rss_mib']:7.1f}/{row['alone_anon_mib']:<7.1f}" if "alone_rss_mib" in row else ""
            print(f"{str(row['step'])[:48]:48} {row['rss_mib']:6.1f} {row['anon_mib']:6.1f} {row['file_mib']:6.1f} | "
                  f"{deltas}{extra}")
            if args.packages and row.get("packages"):
                print(f"{'':4}new: {' '.join(row['packages'])}")  # type: ignore[arg-type]
        print(f"threads {proc_threads()}, modules {len(sys.modules)}, pid {os.getpid()}")
    if args.importtime:
        entries = importtime(args.importtime, args.python_flag)
        if args.json:
            for cum, self_us, name in entries:
                print(json.dumps({"importtime_module": name.strip(), "cumulative_ms": round(cum / 1000, 1),
                                  "self_ms": round(self_us / 1000, 1)}))
        else:
            print(f"\n-X importtime, top {args.importtime} cumulative (ms): cumulative  self  module")
            for cum, self_us, name in entries:
                print(f"{cum / 1000:8.1f} {self_us / 1000:6.1f}  {name}")
    if args.floor:
        result = floor(args.python_flag, args.floor_codec)
        what = (f"asyncio, aiohttp server + client with TLS context, cryptography Ed25519, {args.floor_codec}, "
                f"prometheus_client, yaml; 200 requests")
        print(json.dumps({"floor_process": what, **result}) if args.json else f"\nfloor process ({what}): "
                                                                                f"{json.dumps(result)}")


if __name__ == "__main__":
    main()

"""The load of bench/coordinator_pod.py: N real agent sessions (``PoolCoordinator``) in one process
of their own (not measured), and the handle the measuring process keeps on it (:class:`Load`).

Run as ``python bench/_coordinator_load.py SPEC.json`` (what :class:`Load` starts): prints a JSON
status line whenever it changes (at most every 0.1 s) and restarts every session on a new URL when
stdin says ``url <URL>``; ``quit`` ends it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

POOL = "bench"

async def run_sessions(spec: dict[str, Any]) -> None:
    """N agent sessions (the load); prints a JSON status line when it changes (at most every 0.1 s),
    and restarts every session on a new URL when stdin says ``url <URL>``."""
    from edgewatch.agent.coordinator import CoordinatorConfig, NodeCertificateTLS, PoolCoordinator, Role
    from edgewatch.core.identity import NodeKey, NodeKeyring, PublicKeys
    from edgewatch.poolcache.resources import DEFAULT_RESOURCES
    from edgewatch_lab.testing.kubeletsim import make_client

    ca_pem = Path(spec["ca"]).read_bytes()
    kube = make_client(spec["kubeconfig"], timeout_s=10)
    config = CoordinatorConfig()
    nodes: list[dict[str, Any]] = spec["nodes"]
    sessions: dict[str, Any] = {}
    tasks: dict[str, asyncio.Task[None]] = {}
    published = PublicKeys()  # every session holds the others' published keys, as agents do
    keyrings = {n["name"]: NodeKeyring(node=n["name"], keys=[NodeKey.generate()], public=published) for n in nodes}

    def make(n: dict[str, Any], url: str) -> Any:
        cut = bool(n["cut"])
        return PoolCoordinator(url=url, pool=POOL, node=n["name"], kube=kube, cloud_ok=lambda: not cut,
                               verdict_of=lambda _n: "healthy", config=config,
                               signer=keyrings[n["name"]],
                               tls=NodeCertificateTLS(ca_pem=ca_pem, cert_file=Path(n["cert"]),
                                                      key_file=Path(n["key"])),
                               pool_resources=DEFAULT_RESOURCES)

    async def start(url: str, *, leader_first: bool) -> None:
        for i, n in enumerate(nodes):
            sessions[n["name"]] = s = make(n, url)
            tasks[n["name"]] = asyncio.create_task(s.run())
            if i == 0 and leader_first:
                deadline = time.monotonic() + 60
                while s.role is not Role.LEADER and time.monotonic() < deadline:
                    await asyncio.sleep(0.1)

    async def stop_all() -> None:
        await asyncio.gather(*(s.close() for s in sessions.values()), return_exceptions=True)
        for t in tasks.values():
            t.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)
        sessions.clear()
        tasks.clear()

    def status() -> dict[str, Any]:
        ss = list(sessions.values())
        leaders = sorted(s.node for s in ss if s.role is Role.LEADER)
        lead = sessions.get(leaders[0]) if leaders else None
        writes = 0.0
        if lead is not None:
            writes = sum(sample.value for metric in lead.cache_leader.metrics.writes.collect()
                         for sample in metric.samples if sample.name.endswith("_total"))
        return {"healthy": sum(s.healthy for s in ss), "ready": sum(s.ready for s in ss), "leaders": leaders,
                "seen_leader": sorted({str(s.leader) for s in ss}),
                "forwarded": sorted(lead.forwarded) if lead is not None else [], "writes": writes}

    lines: asyncio.Queue[str] = asyncio.Queue()
    loop = asyncio.get_running_loop()
    threading.Thread(target=lambda: [loop.call_soon_threadsafe(lines.put_nowait, line) for line in sys.stdin],
                     daemon=True).start()
    await start(spec["url"], leader_first=True)
    last: dict[str, Any] = {}
    last_print = 0.0
    try:
        while True:
            with contextlib.suppress(asyncio.QueueEmpty):
                cmd = lines.get_nowait().split()
                if cmd and cmd[0] == "url":
                    print(json.dumps({"event": "restarting", "t": time.time()}), flush=True)
                    await stop_all()
                    await start(cmd[1], leader_first=False)
                    print(json.dumps({"event": "restarted", "t": time.time()}), flush=True)
                elif cmd and cmd[0] == "quit":
                    return
            now = status()
            changed = {k: v for k, v in now.items() if k != "writes"} != {k: v for k, v in last.items() if k != "writes"}
            if changed or time.monotonic() - last_print > 2:
                print(json.dumps({"t": time.time(), **now}), flush=True)
                last, last_print = now, time.monotonic()
            await asyncio.sleep(0.1)
    finally:
        await stop_all()
        await kube.close()


class Load:
    """The load process and the last status it printed (read by a thread)."""

    def __init__(self, spec_file: Path, log: Path) -> None:
        self.proc = subprocess.Popen([sys.executable, __file__, str(spec_file)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=open(log, "ab"), text=True,
                                     start_new_session=True)
        self.status: dict[str, Any] = {}
        self.history: list[dict[str, Any]] = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with contextlib.suppress(ValueError):
                entry = json.loads(line)
                self.history.append(entry)
                if "event" not in entry:
                    self.status = entry

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):
                self.send("quit")
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


def first_time(history: list[dict[str, Any]], after: float, predicate: Callable[[dict[str, Any]], bool]) -> float | None:
    """The wall time of the first status line after ``after`` that satisfies ``predicate``."""
    for entry in history:
        if "event" not in entry and entry["t"] >= after and predicate(entry):
            return float(entry["t"])
    return None


if __name__ == "__main__":
    asyncio.run(run_sessions(json.loads(Path(sys.argv[1]).read_text())))

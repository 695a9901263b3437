"""What the benchmarks share: loopback node addresses, a process's CPU and RSS from /proc, the
apiserver's watch-event counter, and the apiserver's audit log read by caller.

Not a benchmark itself; imported by the scripts beside it (``python bench/<script>.py`` puts this
folder on ``sys.path``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path

from aiohttp import web

CLK_TCK = os.sysconf("SC_CLK_TCK")
_WATCH_EVENTS = re.compile(r'^apiserver_watch_events_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$', re.M)


def address(i: int) -> str:
    """Loopback InternalIP of bench node ``i`` (127.1.x.y, up to 62,500 nodes)."""
    return f"127.1.{i // 250}.{i % 250 + 1}"


def proc_cpu_s(pid: int) -> float:
    """CPU time (user + system) of process ``pid`` so far, seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def proc_rss_mib(pid: int) -> float:
    """Resident memory of process ``pid`` now, MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def watch_events(metrics_text: str) -> Counter[str]:
    """``apiserver_watch_events_total`` from the apiserver's /metrics text, by ``group/kind``."""
    out: Counter[str] = Counter()
    for m in _WATCH_EVENTS.finditer(metrics_text):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group("labels")))
        kind = labels.get("resource") or labels.get("kind") or "?"
        out[f"{labels.get('group', '') or 'core'}/{kind}"] += int(float(m.group("value")))
    return out


def audit_requests(path: Path, offset: int, *, caller: Callable[[dict], str | None],
                   with_namespace: bool = False) -> tuple[Counter[tuple[str, str, str]], int]:
    """Completed requests in the audit log from byte ``offset`` on (whole lines only):
    (caller, verb, resource[/subresource][@namespace]) -> count, and the offset to go on from.
    ``caller(event)`` names who made a request, or None to skip it."""
    counts: Counter[tuple[str, str, str]] = Counter()
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read()
    end = data.rfind(b"\n") + 1
    for line in data[:end].splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("stage") != "ResponseComplete":
            continue
        who = caller(event)
        if who is None:
            continue
        ref = event.get("objectRef") or {}
        resource = ref.get("resource", "") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        if with_namespace and ref.get("namespace"):
            resource += f"@{ref['namespace']}"
        counts[(who, event.get("verb", ""), resource)] += 1
    return counts, offset + end


async def healthz_server(host: str = "127.0.0.1", port: int = 10248) -> web.AppRunner:
    """A kubelet /healthz that always answers ok (every bench agent's ``--kubelet-healthz-url``)."""
    app = web.Application()
    app.router.add_get("/healthz", lambda _r: web.Response(text="ok"))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner


def stop_processes(procs: Iterable[subprocess.Popen], *, grace_s: float = 10.0) -> None:
    """SIGTERM every process, then wait up to ``grace_s`` seconds for each and SIGKILL the rest."""
    procs = list(procs)
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()

"""What the benchmarks share: loopback node addresses, a process's CPU, RSS and memory breakdown
(``/proc/<pid>/smaps_rollup``) and thread count from /proc, the apiserver's watch-event counter, and
the apiserver's audit log read by caller.

Not a benchmark itself; imported by the scripts beside it (``python bench/<script>.py`` puts this
folder on ``sys.path``). It imports only the stdlib at module level (aiohttp inside
``healthz_server``), so bench/agent_imports.py can use it without measuring aiohttp in its baseline.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
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


def smaps_rollup_kib(pid: int | str = "self") -> dict[str, int]:
    """``/proc/<pid>/smaps_rollup`` as ``{field: kB}`` (Rss, Pss, Anonymous, Shared_Clean, ...);
    ``pid`` may be ``"self"``. Linux >= 4.14."""
    out: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 2 and parts[0].endswith(":") and parts[1].isdigit():
            out[parts[0][:-1]] = int(parts[1])
    return out


def proc_memory_mib(pid: int | str = "self") -> dict[str, float]:
    """Where a process's resident memory is, MiB, from smaps_rollup:

        rss_mib   Rss
        anon_mib  Anonymous: the heap, thread stacks, arenas -- the process's own, never shared
        file_mib  Rss - Anonymous: file-backed pages (shared libraries, extension modules,
                  mmapped files; shared with every process mapping the same files) and shmem
        pss_mib   Pss: Rss with each shared page divided by the number of processes sharing it
    """
    kib = smaps_rollup_kib(pid)
    rss, anon = kib.get("Rss", 0), kib.get("Anonymous", 0)
    return {"rss_mib": rss / 1024, "anon_mib": anon / 1024, "file_mib": (rss - anon) / 1024,
            "pss_mib": kib.get("Pss", 0) / 1024}


def proc_memory_map_mib(pid: int | str = "self", *, top: int = 10) -> dict[str, object]:
    """Where the resident memory of process ``pid`` lies, from ``/proc/<pid>/smaps`` (MiB):

        heap_mib         Rss of [heap] (glibc malloc's brk heap: objects > 512 bytes, C libraries)
        anon_mmap_mib    Rss of unnamed anonymous mappings (pymalloc's 1 MiB arenas, large mallocs,
                         glibc's per-thread arenas, thread stacks)
        stack_mib        Rss of [stack] (the main thread)
        lib_anon_mib     Anonymous pages inside file mappings (shared libraries' relocated and
                         written data: private to the process although file-backed)
        lib_file_mib     the other pages of file mappings (code and read-only data, shareable)
        libs             the ``top`` files by Rss (their anonymous pages included): {basename: MiB}
    """
    heap = anon_mmap = stack = lib_anon = lib_file = 0
    by_file: Counter[str] = Counter()
    name = ""
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split(maxsplit=5)
        if len(head) >= 5 and "-" in head[0] and not head[0].endswith(":"):
            name = head[5].strip() if len(head) > 5 else ""
            continue
        if len(head) < 2 or not head[1].isdigit():
            continue
        kib = int(head[1])
        if head[0] == "Rss:":
            if name == "[heap]":
                heap += kib
            elif name == "[stack]":
                stack += kib
            elif name.startswith("/"):
                by_file[os.path.basename(name)] += kib
                lib_file += kib
            elif name == "":
                anon_mmap += kib
        elif head[0] == "Anonymous:" and name.startswith("/"):
            lib_anon += kib
            lib_file -= kib
    return {"heap_mib": round(heap / 1024, 1), "anon_mmap_mib": round(anon_mmap / 1024, 1),
            "stack_mib": round(stack / 1024, 1), "lib_anon_mib": round(lib_anon / 1024, 1),
            "lib_file_mib": round(lib_file / 1024, 1),
            "libs": {k: round(v / 1024, 1) for k, v in by_file.most_common(top)}}


def proc_threads(pid: int | str = "self") -> int:
    """Number of threads of process ``pid`` now."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    return 0


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
    from aiohttp import web  # here, so that importing this module stays cheap (bench/agent_imports.py)

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

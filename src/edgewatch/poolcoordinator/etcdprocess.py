"""The pool coordinator's etcd as a supervised child process (docs/install.md, docs/security.md).

:func:`etcd_argv` (pure) builds the command line: a single-member etcd whose clients connect over
TLS on ``<HOST_IP>:<port>`` and ``127.0.0.1:<port>`` with a certificate from the pool's CA
(``--client-cert-auth``: etcd takes the user from the certificate's CN), whose peer and metrics
listeners stay on loopback (``port+2``, ``port+3``; ``port+1`` is the coordinator's ops port), with
periodic compaction (5 min), a 2 GiB quota and snapshots every 10000 writes. The peer URL is on
loopback, so the member's stored identity never depends on the node's address. The data lives
under ``<data-dir>/etcd`` on the node's hostPath: a pod rescheduled to another node starts on an
empty etcd (the pool's cache re-fills from its leader's list, heartbeats re-register, the members
loop recreates the users).

:class:`EtcdSupervisor` runs it until cancelled: etcd's output goes to our log line by line (its
JSON lines are re-logged at their level), an exit is logged and etcd restarted after a capped
jittered backoff (``edgewatch.kube.backoff``; the schedule starts over after ``stable_s`` of
running), and on cancellation etcd is sent SIGTERM, then SIGKILL after ``stop_timeout_s``, and
waited for: no process is left behind.

A new pool CA does need one: etcd reads ``--trusted-ca-file`` only when it starts, so the
coordinator calls :meth:`EtcdSupervisor.restart` when the CA changes (a few seconds without etcd:
the agents reconnect as after any blip). Certificate rotation needs no restart: etcd re-reads ``--cert-file``/``--key-file`` for every new
client TLS handshake (etcd-io/etcd#7829, ``pkg/transport`` ``GetCertificate``; also for clients
that connect by IP address, without SNI, since etcd-io/etcd#9570, v3.2/v3.3 on); the integration
test checks it on the binary we ship.

Limits: a SIGKILL of this process leaves etcd running until its container ends (the pod's
containers share one lifetime).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import random
import signal
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from edgewatch.kube.backoff import backoff_delay

__all__ = ["COMPACTION_RETENTION", "ETCD_GOMEMLIMIT", "QUOTA_BACKEND_BYTES", "EtcdSupervisor", "etcd_argv", "metrics_port", "peer_port"]

log = logging.getLogger(__name__)
etcd_log = logging.getLogger("edgewatch.poolcoordinator.etcd")

QUOTA_BACKEND_BYTES = 2 * 1024**3
"""etcd's ``--quota-backend-bytes`` (2 GiB, etcd's default: a pool's heartbeats, election and cache
need far less; one member's writes are bounded far below it, ``edgewatch.pooletcd.quota``)."""

ETCD_GOMEMLIMIT = "320MiB"
"""etcd's ``GOMEMLIMIT`` unless the pod sets one: under the coordinator pod's 512Mi limit, leaving
room for the Python process beside it."""

COMPACTION_RETENTION = "5m"
"""``--auto-compaction-retention`` (periodic): revisions older than 5 minutes are dropped, which
bounds the history one member's writes can pile up (``edgewatch.pooletcd.quota``); a watch
resumed from further back starts over from a listing."""

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING, "error": logging.ERROR,
           "dpanic": logging.CRITICAL, "panic": logging.CRITICAL, "fatal": logging.CRITICAL}
_MAX_LINE = 1 << 20


def peer_port(port: int) -> int:
    """etcd's peer port (loopback only) for client port ``port``: ``port + 2``."""
    return port + 2


def metrics_port(port: int) -> int:
    """etcd's plain-HTTP metrics port (loopback only) for client port ``port``: ``port + 3``."""
    return port + 3


def etcd_argv(*, binary: str, node: str, host_ip: str, port: int, data_dir: Path, cert_file: Path, key_file: Path,
              ca_file: Path, loopback_only: bool = False) -> list[str]:
    """The etcd command line (see the module docstring).

    Args:
        binary: the etcd executable.
        node: the node the pod runs on (the member's name).
        host_ip: the node's address (clients of other nodes connect to it).
        port: the client port (1 .. 65532: ``port+3`` must be a port).
        data_dir: the coordinator's data folder (etcd's is ``<data_dir>/etcd``).
        cert_file / key_file: the serving certificate and its key.
        ca_file: the pool CA: the only client certificates accepted are signed by it.
        loopback_only: listen for clients on ``127.0.0.1`` alone (until the access control is on:
            before it, every certificate of the pool CA may do anything).

    Raises:
        ValueError: a port out of range or an empty name or address.
    """
    if not 1 <= port <= 65535 - 3:
        raise ValueError(f"port must be 1 .. 65532, got {port}")
    if not node or not host_ip:
        raise ValueError("node and host_ip must not be empty")
    host = f"[{host_ip}]" if ":" in host_ip else host_ip
    peer = f"http://127.0.0.1:{peer_port(port)}"
    clients = [] if loopback_only else [f"https://{host}:{port}"]
    if host_ip != "127.0.0.1" or loopback_only:
        clients.append(f"https://127.0.0.1:{port}")
    return [
        binary,
        "--name", node,
        "--data-dir", str(data_dir / "etcd"),
        "--listen-client-urls", ",".join(clients),
        "--advertise-client-urls", f"https://{host}:{port}",
        "--listen-peer-urls", peer,
        "--initial-advertise-peer-urls", peer,
        "--initial-cluster", f"{node}={peer}",
        "--listen-metrics-urls", f"http://127.0.0.1:{metrics_port(port)}",
        "--cert-file", str(cert_file),
        "--key-file", str(key_file),
        "--trusted-ca-file", str(ca_file),
        "--client-cert-auth",
        "--auto-compaction-mode", "periodic",
        "--auto-compaction-retention", COMPACTION_RETENTION,
        "--quota-backend-bytes", str(QUOTA_BACKEND_BYTES),
        "--snapshot-count", "10000",
        # No JSON gateway: nothing of ours uses it, it is one more way in (a put
        # through it was found accepted), and with --client-cert-auth it dials etcd itself with the serving
        # certificate, which (server auth only) etcd refuses every few seconds.
        "--enable-grpc-gateway=false",
    ]


def _relog(raw: bytes) -> None:
    text = raw.decode(errors="replace").rstrip()
    if not text:
        return
    try:
        entry = json.loads(text)
    except ValueError:
        entry = None
    if isinstance(entry, dict):
        level = _LEVELS.get(str(entry.get("level", "info")), logging.INFO)
        fields = {f"etcd_{k}": v for k, v in entry.items() if k not in ("level", "msg", "ts")}
        etcd_log.log(level, "etcd: %s", entry.get("msg", ""), extra=fields)
    else:
        etcd_log.info("etcd: %s", text)


def _ignore() -> None:
    return None


class EtcdSupervisor:
    """Runs etcd and restarts it when it exits (see the module docstring).

    Args (keyword-only):
        argv: the command line (:func:`etcd_argv`).
        on_restart: called before each restart (a metric); must not raise.
        on_exit: called the moment etcd has exited (asked to, or not), before any backoff: whoever
            reports readiness must stop saying "ready" now, not at its next probe; must not raise.
        stop_timeout_s: seconds between SIGTERM and SIGKILL on shutdown (default 10 s).
        backoff_initial_s / backoff_cap_s: the restart delays, seconds (default 1 s doubling to 30 s,
            jittered).
        stable_s: a run this long (seconds) resets the backoff (default 60 s).
        rng: random source of the jitter.

    Attributes:
        starts: how many times etcd was started.
    """

    def __init__(self, *, argv: Sequence[str], on_restart: Callable[[], None] = _ignore,
                 on_exit: Callable[[], None] = _ignore, stop_timeout_s: float = 10.0,
                 backoff_initial_s: float = 1.0, backoff_cap_s: float = 30.0, stable_s: float = 60.0,
                 rng: random.Random | None = None) -> None:
        if not argv:
            raise ValueError("argv must not be empty")
        self.argv = tuple(argv)
        self._on_restart = on_restart
        self._on_exit = on_exit
        self.stop_timeout_s = stop_timeout_s
        self.backoff_initial_s = backoff_initial_s
        self.backoff_cap_s = backoff_cap_s
        self.stable_s = stable_s
        self._rng = rng
        self._proc: asyncio.subprocess.Process | None = None
        self._restart_reason: str | None = None
        self.starts = 0

    @property
    def pid(self) -> int | None:
        """The running etcd's process id, or None."""
        proc = self._proc
        return proc.pid if proc is not None and proc.returncode is None else None

    async def run(self) -> None:
        """Run etcd, restarting it when it exits, until cancelled (then stop it; see the module
        docstring). Raises OSError if the binary cannot be started at all (not found, not
        executable): a restart would not help."""
        attempt = 0
        while True:
            started = time.monotonic()
            code = await self._run_once()
            self._on_exit()
            ran_s = time.monotonic() - started
            reason, self._restart_reason = self._restart_reason, None
            if reason is not None:  # asked for (restart()): at once, and not a crash
                attempt = 0
                log.info("etcd stopped to be restarted: %s", reason, extra={"exit_code": code, "reason": reason})
                self._on_restart()
                continue
            attempt = 1 if ran_s >= self.stable_s else attempt + 1
            delay = backoff_delay(attempt, initial=self.backoff_initial_s, cap=self.backoff_cap_s, rng=self._rng)
            log.warning("etcd exited with code %s after %.1f s; restarting in %.1f s", code, ran_s, delay,
                        extra={"exit_code": code, "ran_s": round(ran_s, 1)})
            await asyncio.sleep(delay)
            self._on_restart()

    async def restart(self, reason: str) -> bool:
        """Stop the running etcd (SIGTERM, SIGKILL after ``stop_timeout_s``) so that :meth:`run`
        starts it again at once, e.g. to load a new ``--trusted-ca-file`` (etcd reads its client
        CA pool only when it starts). Returns False if no etcd was running (nothing to do)."""
        proc = self._proc
        if proc is None or proc.returncode is not None:
            return False
        self._restart_reason = reason
        await self._stop(proc)
        return True

    async def _run_once(self) -> int:
        # Go's soft memory limit below the pod's 512Mi: etcd's garbage collector works harder
        # before the container is OOM-killed (one member's large reads spike its heap)
        env = {**os.environ, "GOMEMLIMIT": os.environ.get("GOMEMLIMIT", ETCD_GOMEMLIMIT)}
        proc = await asyncio.create_subprocess_exec(
            *self.argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, start_new_session=True, limit=_MAX_LINE, env=env)
        self._proc = proc
        self.starts += 1
        log.info("etcd started", extra={"pid": proc.pid})
        try:
            async with asyncio.TaskGroup() as tg:
                assert proc.stdout is not None
                tg.create_task(self._pump(proc.stdout))
                code = await proc.wait()
            return code
        finally:
            if proc.returncode is None:
                await self._stop(proc)
            self._proc = None

    async def _pump(self, stream: asyncio.StreamReader) -> None:
        while True:
            try:
                line = await stream.readline()
            except ValueError:  # a line over the limit: skip what is buffered
                line = b"(etcd line over 1 MiB dropped)"
            if not line:
                return
            _relog(line)

    async def _stop(self, proc: asyncio.subprocess.Process) -> None:
        """SIGTERM, then SIGKILL after ``stop_timeout_s``; waits for the process either way."""
        try:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(self.stop_timeout_s):
                    await proc.wait()
            except TimeoutError:
                log.warning("etcd did not stop within %.0f s of SIGTERM: killing it", self.stop_timeout_s)
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        except asyncio.CancelledError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await asyncio.shield(proc.wait())
            raise
        log.info("etcd stopped", extra={"exit_code": proc.returncode})

"""The network lab's boundary with the system: ``ip``/``nft`` commands, namespace and link
listings, killing what runs in a namespace, reading ``/proc``.

Every command of the lab runs through :func:`run_cmd`, which calls the package attribute
``edgewatch_lab.testing.netlab._run_cmd`` at call time.  That attribute is this module's
:func:`_run_cmd` unless a test replaces it: it is the one seam through which tests inject command
failures (``monkeypatch.setattr(netlab, "_run_cmd", ...)``).

Limits: Linux only; ``ip`` (iproute2) must be on ``PATH``; every command runs with a timeout and
its output is captured as text (nothing streams).  Listings are of the root (current) namespace
and of the names ``ip netns`` keeps in ``/run/netns``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

#: Directory where ``ip netns`` keeps its namespace bind mounts.
NETNS_RUN_DIR: Final = Path("/run/netns")
DEFAULT_COMMAND_TIMEOUT: Final = 10.0
KILL_TIMEOUT: Final = 5.0


class NetLabError(RuntimeError):
    """A lab operation failed.

    Attributes:
        argv: the command that failed, when the failure was a command
            (``None`` otherwise).
        returncode: its exit status (``None`` if it did not run or timed out).
        stderr: its standard error, stripped (``""`` if not applicable).
    """

    def __init__(
        self,
        message: str,
        *,
        argv: Sequence[str] | None = None,
        returncode: int | None = None,
        stderr: str = "",
    ) -> None:
        super().__init__(message)
        self.argv = list(argv) if argv is not None else None
        self.returncode = returncode
        self.stderr = stderr


def _run_cmd(
    argv: Sequence[str],
    *,
    input_text: str | None = None,
    timeout: float = DEFAULT_COMMAND_TIMEOUT,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run one command, capturing text output, always with a timeout.

    Args:
        argv: the command.
        input_text: text fed on stdin (e.g. an ``ip -batch -`` script).
        timeout: seconds before the command is killed.
        check: raise on a non-zero exit status.

    Returns:
        The completed process (``stdout``/``stderr`` as ``str``).

    Raises:
        NetLabError: the command could not start, timed out, or (``check``)
            exited non-zero; the message names the command and its stderr.
    """
    cmd = shlex.join(argv)
    try:
        proc = subprocess.run(
            list(argv),
            input=input_text,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise NetLabError(f"command timed out after {timeout:g}s: {cmd}", argv=argv) from exc
    except OSError as exc:
        raise NetLabError(f"cannot run {cmd}: {exc}", argv=argv) from exc
    if check and proc.returncode != 0:
        stderr = proc.stderr.strip()
        message = f"command failed with exit status {proc.returncode}: {cmd}: {stderr or '(no stderr)'}"
        if input_text:
            message += f"\n--- stdin ---\n{input_text.rstrip()}"
        raise NetLabError(message, argv=argv, returncode=proc.returncode, stderr=stderr)
    return proc


def run_cmd(argv: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run one command through the package's ``_run_cmd`` (arguments as :func:`_run_cmd`)."""
    return sys.modules[__package__]._run_cmd(argv, **kwargs)


def list_netns() -> set[str]:
    """Names of the namespaces known to ``ip netns`` (``/run/netns``)."""
    try:
        return {entry.name for entry in os.scandir(NETNS_RUN_DIR)}
    except FileNotFoundError:
        return set()


def list_links(*, timeout: float) -> set[str]:
    """Names of the network interfaces of the root (current) namespace."""
    proc = run_cmd(["ip", "-j", "link", "show"], timeout=timeout)
    try:
        return {entry["ifname"] for entry in json.loads(proc.stdout or "[]")}
    except (ValueError, KeyError, TypeError) as exc:
        raise NetLabError(f"cannot parse `ip -j link show` output: {exc}") from exc


def _netns_pids(netns: str, *, timeout: float) -> set[int]:
    """Pids of the live (non-zombie) processes in ``netns``; empty if it is gone."""
    proc = run_cmd(["ip", "netns", "pids", netns], timeout=timeout, check=False)
    if proc.returncode != 0:
        if netns not in list_netns():
            return set()
        raise NetLabError(
            f"cannot list processes of netns {netns}: {proc.stderr.strip()}",
            argv=["ip", "netns", "pids", netns],
            returncode=proc.returncode,
            stderr=proc.stderr.strip(),
        )
    return {int(tok) for tok in proc.stdout.split() if tok.isdigit()}


def kill_netns_processes(netns: str, *, timeout: float) -> int:
    """SIGKILL every process in ``netns`` until none is left.

    Returns:
        How many distinct processes were signalled.

    Raises:
        NetLabError: processes were still present after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    signalled: set[int] = set()
    own_pid = os.getpid()
    while True:
        pids = _netns_pids(netns, timeout=timeout) - {own_pid}
        if not pids:
            return len(signalled)
        if time.monotonic() > deadline:
            raise NetLabError(f"processes {sorted(pids)} in netns {netns} survived SIGKILL for {timeout:g}s")
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        signalled |= pids
        time.sleep(0.01)


def proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks) of ``pid``, or None if gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw.rsplit(")", 1)[-1].split()
    try:
        return fields[0], int(fields[19])
    except (IndexError, ValueError):
        return None

"""The pool coordinator's etcd command line (pure) and its supervisor (with stand-in processes)."""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import time
from pathlib import Path

import pytest

from edgewatch.poolcoordinator.etcdprocess import (
    QUOTA_BACKEND_BYTES, EtcdSupervisor, etcd_argv, metrics_port, peer_port,
)

TLS = Path("/d/tls")


def _argv(**kw: object) -> list[str]:
    args: dict[str, object] = dict(binary="/bin/etcd", node="edge-1", host_ip="10.0.0.5", port=12379,
                                   data_dir=Path("/d"), cert_file=TLS / "server.crt", key_file=TLS / "server.key",
                                   ca_file=TLS / "ca.crt")
    args.update(kw)
    return etcd_argv(**args)  # type: ignore[arg-type]


def _flags(argv: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    i = 1
    while i < len(argv):
        if "=" in argv[i]:  # --flag=value
            name, _, value = argv[i].partition("=")
            out[name] = value
            i += 1
        elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            out[argv[i]] = argv[i + 1]
            i += 2
        else:
            out[argv[i]] = ""
            i += 1
    return out


def test_the_argv_is_exactly_the_documented_one() -> None:
    assert _argv() == [
        "/bin/etcd", "--name", "edge-1", "--data-dir", "/d/etcd",
        "--listen-client-urls", "https://10.0.0.5:12379,https://127.0.0.1:12379",
        "--advertise-client-urls", "https://10.0.0.5:12379",
        "--listen-peer-urls", "http://127.0.0.1:12381",
        "--initial-advertise-peer-urls", "http://127.0.0.1:12381",
        "--initial-cluster", "edge-1=http://127.0.0.1:12381",
        "--listen-metrics-urls", "http://127.0.0.1:12382",
        "--cert-file", "/d/tls/server.crt", "--key-file", "/d/tls/server.key", "--trusted-ca-file", "/d/tls/ca.crt",
        "--client-cert-auth", "--auto-compaction-mode", "periodic", "--auto-compaction-retention", "5m",
        "--quota-backend-bytes", str(2 * 1024**3), "--snapshot-count", "10000", "--enable-grpc-gateway=false",
    ]


def test_clients_need_tls_and_only_loopback_gets_peer_and_metrics() -> None:
    flags = _flags(_argv())
    assert all(u.startswith("https://") for u in flags["--listen-client-urls"].split(","))
    assert "--client-cert-auth" in flags and flags["--trusted-ca-file"] == "/d/tls/ca.crt"
    for flag in ("--listen-peer-urls", "--initial-advertise-peer-urls", "--listen-metrics-urls"):
        assert flags[flag].startswith("http://127.0.0.1:"), flag
    assert QUOTA_BACKEND_BYTES == 2 * 1024**3


def test_ports_and_addresses() -> None:
    assert (peer_port(12379), metrics_port(12379)) == (12381, 12382)
    # The ops port (port+1) is left to the coordinator.
    assert "12380" not in " ".join(_argv())
    loopback = _flags(_argv(host_ip="127.0.0.1"))
    assert loopback["--listen-client-urls"] == "https://127.0.0.1:12379"
    v6 = _flags(_argv(host_ip="fd00::5"))
    assert v6["--listen-client-urls"] == "https://[fd00::5]:12379,https://127.0.0.1:12379"
    assert v6["--advertise-client-urls"] == "https://[fd00::5]:12379"


@pytest.mark.parametrize("bad", [{"port": 0}, {"port": 65533}, {"node": ""}, {"host_ip": ""}])
def test_bad_arguments_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        _argv(**bad)


def test_the_flags_exist_in_the_etcd_we_test_with() -> None:
    from edgewatch_lab.testing.binaries import ensure_binaries

    binary = ensure_binaries().etcd  # built (or taken from the cache) like every other test's binaries
    help_text = subprocess.run([str(binary), "--help"], capture_output=True, text=True, timeout=30).stdout
    help_text += subprocess.run([str(binary), "--help"], capture_output=True, text=True, timeout=30).stderr
    for flag in _flags(_argv()):
        assert f"{flag} " in help_text or f"{flag}\n" in help_text, flag


# -- the supervisor, with small shell scripts standing in for etcd -------------------------------------


def _script(tmp_path: Path, body: str) -> list[str]:
    path = tmp_path / "fake-etcd.sh"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return [str(path)]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone for our purpose; asyncio reaps its children.
    return True


async def _until(predicate: object, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def test_an_exiting_etcd_is_restarted_with_backoff_and_counted(tmp_path: Path,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    restarts: list[float] = []
    sup = EtcdSupervisor(argv=_script(tmp_path, 'echo \'{"level":"warn","msg":"hello from etcd"}\'\nexit 3\n'),
                         on_restart=lambda: restarts.append(time.monotonic()), backoff_initial_s=0.05,
                         backoff_cap_s=0.2, rng=random.Random(1))
    task = asyncio.create_task(sup.run())
    caplog.set_level("INFO")
    await _until(lambda: len(restarts) >= 3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sup.starts >= 3 and sup.pid is None
    assert any(r.getMessage() == "etcd: hello from etcd" and r.levelname == "WARNING" for r in caplog.records)
    assert any("exited with code 3" in r.getMessage() for r in caplog.records)


async def test_cancellation_stops_etcd_with_sigterm(tmp_path: Path) -> None:
    sup = EtcdSupervisor(argv=_script(tmp_path, "trap 'exit 0' TERM\nwhile :; do sleep 0.05; done\n"))
    task = asyncio.create_task(sup.run())
    await _until(lambda: sup.pid is not None)
    pid = sup.pid
    assert pid is not None
    await asyncio.sleep(0.2)  # let the shell install its trap
    started = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.monotonic() - started < 5 and not _alive(pid)


async def test_an_etcd_ignoring_sigterm_is_killed_after_the_timeout(tmp_path: Path) -> None:
    sup = EtcdSupervisor(argv=_script(tmp_path, "trap '' TERM\nwhile :; do sleep 0.05; done\n"), stop_timeout_s=0.5)
    task = asyncio.create_task(sup.run())
    await _until(lambda: sup.pid is not None)
    pid = sup.pid
    assert pid is not None
    await asyncio.sleep(0.2)
    started = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert 0.4 < time.monotonic() - started < 5 and not _alive(pid)


async def test_a_missing_binary_is_an_error_not_a_restart_loop(tmp_path: Path) -> None:
    sup = EtcdSupervisor(argv=[str(tmp_path / "no-such-etcd")])
    with pytest.raises(OSError):
        await sup.run()


def test_empty_argv_is_refused() -> None:
    with pytest.raises(ValueError):
        EtcdSupervisor(argv=[])



async def test_a_restart_asked_for_stops_etcd_and_starts_it_again_at_once(tmp_path: Path,
                                                                           caplog: pytest.LogCaptureFixture) -> None:
    """A new pool CA: etcd reads --trusted-ca-file only at start. The restart is not a crash: no
    backoff (the backoff here would be an hour), and it is counted."""
    restarts: list[float] = []
    exits: list[int] = []
    sup = EtcdSupervisor(argv=_script(tmp_path, "trap 'exit 0' TERM\nwhile :; do sleep 0.05; done\n"),
                         on_restart=lambda: restarts.append(time.monotonic()), backoff_initial_s=3600,
                         backoff_cap_s=3600, on_exit=lambda: exits.append(sup.starts))
    assert await sup.restart("nothing running") is False
    task = asyncio.create_task(sup.run())
    caplog.set_level("INFO")
    try:
        await _until(lambda: sup.pid is not None)
        first = sup.pid
        assert first is not None
        await asyncio.sleep(0.2)  # let the shell install its trap
        assert await sup.restart("pool CA changed") is True
        assert not _alive(first)
        await _until(lambda: sup.pid is not None and sup.pid != first)
        assert sup.starts == 2 and len(restarts) == 1
        assert exits == [1]  # told at the first process's exit, before the second started
        assert any("restarted: pool CA changed" in r.getMessage() for r in caplog.records)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


def test_etcd_listens_on_loopback_only_until_the_access_control_is_on(tmp_path: Path) -> None:
    """Before the first reconcile switches authentication on, any certificate of the pool CA may do
    anything in etcd: it listens on 127.0.0.1 alone then."""
    common = dict(binary="etcd", node="a-1", host_ip="10.0.0.5", port=2379, data_dir=tmp_path,
                  cert_file=tmp_path / "c", key_file=tmp_path / "k", ca_file=tmp_path / "ca")
    closed = etcd_argv(**common, loopback_only=True)  # type: ignore[arg-type]
    opened = etcd_argv(**common)  # type: ignore[arg-type]
    value = lambda argv, flag: argv[argv.index(flag) + 1]  # noqa: E731
    assert value(closed, "--listen-client-urls") == "https://127.0.0.1:2379"
    assert value(opened, "--listen-client-urls") == "https://10.0.0.5:2379,https://127.0.0.1:2379"

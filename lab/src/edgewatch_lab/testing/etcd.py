"""A real, single-member etcd for tests and the playground: the node pool's coordinator store.

``EtcdServer`` runs the upstream etcd binary (``edgewatch_lab.testing.binaries``) on one address with
its own ports and a data dir that survives ``stop()``/``kill()``/``restart()``, so "the coordinator
was restarted" in a test is the real thing: same URL, same data, and etcd's own lease handling
across a restart (leases survive in the data dir; when etcd comes back it re-arms each lease to its
full TTL plus an election timeout, and expires those that are not kept alive afterwards).

``start()``, ``stop()``, ``kill()`` and ``restart()`` block (they wait for the process); from
asyncio code call them through ``asyncio.to_thread``.

Example::

    with EtcdServer(binary=binaries.etcd) as etcd:
        print(etcd.client_url)          # http://127.0.0.1:<port>
        etcd.kill()                     # SIGKILL: the coordinator crashed
        etcd.start()                    # same ports, same data dir

The process runs in its own session (process group), so ``stop()``/``kill()`` reach it and any
child by ``os.killpg`` on the PID this object started; nothing is ever killed by name.

Starting it elsewhere (the playground's network namespaces): pass ``popen``, a callable with the
signature of ``subprocess.Popen(argv, **kwargs)``, e.g.
``lambda argv, **kw: subprocess.Popen(["ip", "netns", "exec", "pool-a", *argv], **kw)``
(``ip netns exec`` execs the command, so the PID is etcd's). Then give ``client_port`` and
``peer_port`` explicitly (free ports are picked by binding ``address`` in *this* namespace), and
make sure ``address`` is reachable from the caller: readiness is probed on etcd's plain-HTTP
metrics listener ``http://<address>:<metrics_port>/health``.

TLS (what a production pool coordinator should run): pass ``tls=EtcdServerTLS(...)``; clients must
then present a certificate signed by ``trusted_ca_file`` (``--client-cert-auth``). The health probe
stays on the separate plain-HTTP metrics port, which serves only /health and /metrics.
``EtcdServerTLS.signed_by_ca(folder, ca_cert_pem=..., ca_key_pem=...)`` makes the set a node pool's
coordinator runs with (docs/security.md): a serving certificate signed by the pool's CA (the controller's
``poolca``; SANs ``localhost`` and the addresses given), and the same CA as the one trusted for
client certificates, with ``--client-cert-auth``.

Limits: one member, no peer TLS, no auth users/roles; ``--unsafe-no-fsync`` by default (a process
crash keeps the data because the page cache survives it, a machine crash would not); ports are
picked free at construction and may, rarely, be taken by another process before etcd binds them.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from edgewatch_lab.testing.controlplane import free_port, log_tail

log = logging.getLogger(__name__)

PopenFactory = Callable[..., "subprocess.Popen[bytes]"]


class EtcdError(RuntimeError):
    """etcd failed to start or become healthy; the message carries the tail of its log."""


@dataclass(frozen=True)
class EtcdServerTLS:
    """Client-facing TLS of the etcd server.

    Attributes:
        cert_file: serving certificate (its SANs must cover the address clients dial).
        key_file: its private key.
        trusted_ca_file: CA that signs the client certificates etcd accepts.
        client_cert_auth: require a client certificate (``--client-cert-auth``); True in production.
    """

    cert_file: Path
    key_file: Path
    trusted_ca_file: Path
    client_cert_auth: bool = True

    @classmethod
    def signed_by_ca(cls, folder: Path, *, ca_cert_pem: bytes, ca_key_pem: bytes,
                     addresses: tuple[str, ...] = ("127.0.0.1",), dns_names: tuple[str, ...] = ("localhost",),
                     lifetime: dt.timedelta = dt.timedelta(days=1)) -> "EtcdServerTLS":
        """A serving certificate signed by the given CA (e.g. a pool CA: ``poolca.make_ca``), that CA
        as the trusted client CA, and ``--client-cert-auth``: only clients with a certificate from
        this CA are let in. Writes ``etcd-server.crt``/``.key`` (0600) and ``etcd-trusted-ca.crt``
        into ``folder``.

        Raises:
            ValueError: the CA PEMs do not parse.
        """
        ca_cert = x509.load_pem_x509_certificate(ca_cert_pem)
        ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.timezone.utc)
        sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
        sans += [x509.IPAddress(ipaddress.ip_address(a)) for a in addresses]
        cert = (x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "edgewatch pool coordinator")]))
                .issuer_name(ca_cert.subject).public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + lifetime)
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
                .add_extension(x509.SubjectAlternativeName(sans), critical=False)
                .sign(ca_key, hashes.SHA256()))  # type: ignore[arg-type]
        folder.mkdir(parents=True, exist_ok=True)
        tls = cls(cert_file=folder / "etcd-server.crt", key_file=folder / "etcd-server.key",
                  trusted_ca_file=folder / "etcd-trusted-ca.crt")
        tls.cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        tls.key_file.touch(mode=0o600)
        tls.key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                   serialization.NoEncryption()))
        tls.trusted_ca_file.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
        return tls


class EtcdServer:
    """One etcd member as a child process.

    Args:
        binary: path of the etcd binary.
        address: IPv4 address to listen on (client, peer and metrics listeners).
        client_port, peer_port, metrics_port: ports; None picks a free one on ``address`` now
            (kept for the object's life, so a restart comes back on the same URL).
        data_dir: etcd's data dir; None creates a temporary one that ``cleanup()`` removes. A given
            data dir is never removed.
        name: member name.
        tls: client TLS, see ``EtcdServerTLS``; None serves plain HTTP/gRPC.
        popen: how to start the process (signature of ``subprocess.Popen``); default
            ``subprocess.Popen``. It is called with ``start_new_session=True`` among the kwargs.
        unsafe_no_fsync: pass ``--unsafe-no-fsync`` (faster; data survives a process crash).
        start_timeout_s: how long ``start()`` waits for /health, in seconds.
        extra_args: more etcd flags.

    Raises (from ``start``):
        EtcdError: the process exited or did not become healthy in time.
    """

    def __init__(
        self,
        *,
        binary: Path | str,
        address: str = "127.0.0.1",
        client_port: int | None = None,
        peer_port: int | None = None,
        metrics_port: int | None = None,
        data_dir: Path | None = None,
        name: str = "coordinator",
        tls: EtcdServerTLS | None = None,
        popen: PopenFactory | None = None,
        unsafe_no_fsync: bool = True,
        start_timeout_s: float = 30.0,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        self.binary = Path(binary)
        self.address = address
        self.client_port = client_port or free_port(address)
        self.peer_port = peer_port or free_port(address)
        self.metrics_port = metrics_port or free_port(address)
        self._own_dir = data_dir is None
        self.run_dir = Path(tempfile.mkdtemp(prefix="edgewatch-etcd-")) if data_dir is None else data_dir.parent
        self.data_dir = (self.run_dir / "data") if data_dir is None else data_dir
        self.log_path = self.run_dir / f"etcd-{name}.log"
        self.name = name
        self.tls = tls
        self._popen_factory: PopenFactory = popen or subprocess.Popen
        self.unsafe_no_fsync = unsafe_no_fsync
        self.start_timeout_s = start_timeout_s
        self.extra_args = extra_args
        self._proc: subprocess.Popen[bytes] | None = None

    # -- addresses ------------------------------------------------------------------------------

    @property
    def client_url(self) -> str:
        """The URL clients dial: ``http://address:port`` (``https://`` with TLS)."""
        scheme = "https" if self.tls else "http"
        return f"{scheme}://{self.address}:{self.client_port}"

    @property
    def health_url(self) -> str:
        """Plain-HTTP /health on the metrics listener."""
        return f"http://{self.address}:{self.metrics_port}/health"

    @property
    def pid(self) -> int | None:
        """PID of the running process, or None."""
        return self._proc.pid if self.running else None  # type: ignore[union-attr]

    @property
    def running(self) -> bool:
        """True while the process this object started has not exited."""
        return self._proc is not None and self._proc.poll() is None

    # -- lifecycle ------------------------------------------------------------------------------

    def __enter__(self) -> "EtcdServer":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    def argv(self) -> list[str]:
        """The etcd command line."""
        peer = f"http://{self.address}:{self.peer_port}"
        args = [
            str(self.binary),
            f"--name={self.name}",
            f"--data-dir={self.data_dir}",
            f"--listen-client-urls={self.client_url}",
            f"--advertise-client-urls={self.client_url}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster={self.name}={peer}",
            f"--listen-metrics-urls=http://{self.address}:{self.metrics_port}",
            "--log-level=warn",
        ]
        if self.tls is not None:
            args += [
                f"--cert-file={self.tls.cert_file}",
                f"--key-file={self.tls.key_file}",
                f"--trusted-ca-file={self.tls.trusted_ca_file}",
                f"--client-cert-auth={'true' if self.tls.client_cert_auth else 'false'}",
            ]
        if self.unsafe_no_fsync:
            args.append("--unsafe-no-fsync")
        return args + list(self.extra_args)

    def start(self) -> "EtcdServer":
        """Start etcd (no-op if running) and wait until /health answers ``"health":"true"``."""
        if self.running:
            return self
        self.run_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as out:
            kwargs: dict[str, Any] = {
                "stdout": out, "stderr": subprocess.STDOUT, "stdin": subprocess.DEVNULL,
                "start_new_session": True,  # own process group: killpg reaches it and its children
            }
            self._proc = self._popen_factory(self.argv(), **kwargs)
        log.info("etcd started", extra={"pid": self._proc.pid, "url": self.client_url,
                                        "data_dir": str(self.data_dir)})
        try:
            self.wait_healthy()
        except BaseException:
            self.kill()
            raise
        return self

    def wait_healthy(self, timeout_s: float | None = None) -> None:
        """Block until /health reports healthy.

        Raises:
            EtcdError: the process exited, or it was not healthy within the timeout.
        """
        deadline = time.monotonic() + (self.start_timeout_s if timeout_s is None else timeout_s)
        last = ""
        while time.monotonic() < deadline:
            if self._proc is None or self._proc.poll() is not None:
                code = None if self._proc is None else self._proc.returncode
                raise EtcdError(f"etcd exited with {code}; log tail:\n{log_tail(self.log_path)}")
            try:
                with urllib.request.urlopen(self.health_url, timeout=2) as resp:
                    body = resp.read().decode(errors="replace")
                    if resp.status == 200 and '"health":"true"' in body.replace(" ", ""):
                        return
                    last = body
            except (urllib.error.URLError, OSError) as exc:
                last = str(exc)
            time.sleep(0.1)
        raise EtcdError(f"etcd not healthy at {self.health_url} after {self.start_timeout_s} s ({last}); "
                        f"log tail:\n{log_tail(self.log_path)}")

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop gracefully: SIGTERM to its process group, SIGKILL after ``timeout_s``. Data is kept."""
        self._signal_and_wait(signal.SIGTERM, timeout_s)

    def kill(self) -> None:
        """Crash it: SIGKILL to its process group. Data is kept (see module docstring)."""
        self._signal_and_wait(signal.SIGKILL, 10.0)

    def restart(self) -> "EtcdServer":
        """Stop (if running) and start again on the same ports with the same data dir."""
        self.stop()
        return self.start()

    def cleanup(self) -> None:
        """Kill the process and remove the data dir if this object created it. Safe to call twice."""
        self.kill()
        if self._own_dir:
            shutil.rmtree(self.run_dir, ignore_errors=True)

    def _signal_and_wait(self, sig: signal.Signals, timeout_s: float) -> None:
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        log.info("etcd stopped", extra={"pid": proc.pid, "signal": sig.name, "returncode": proc.returncode})

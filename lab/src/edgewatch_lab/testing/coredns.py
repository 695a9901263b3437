"""A real CoreDNS for one lab node, confined to the node's network namespace, and a minimal DNS
client to ask it.

What it is for
    A node's cluster DNS reads Services, EndpointSlices and Namespaces from the API like
    kube-proxy. :class:`CoreDNS` runs the upstream CoreDNS (v1.15.0, built from the Go module proxy
    by ``hack/binaries/build-coredns.sh`` with the kubernetes plugin; :func:`ensure_coredns`)
    inside an existing network namespace through ``ip netns exec``, serving
    ``cluster.local`` on ``127.0.0.1:<port>`` (UDP and TCP) there, from a kubeconfig: the agent's
    pool cache (``edgewatch kubeconfig``) or the cloud apiserver. :func:`coredns_credentials` gives
    it its own identity as a real cluster does (ServiceAccount ``kube-system/coredns`` bound to a
    ClusterRole ``system:coredns`` with kubeadm's rules: list/watch endpoints, services, pods,
    namespaces and endpointslices). :meth:`CoreDNS.resolve` asks it for a name's A records with
    :func:`encode_query` / :func:`decode_answer` (RFC 1035, standard library only: no DNS package
    is installed here).

Host-wide effects
    None: CoreDNS binds 127.0.0.1 inside the namespace (``bind``), health and ready too; it writes
    only its log in ``work_dir``. It is started in its own process group and killed with the
    thread that started it.

Limits
    A records over UDP only (no EDNS, no TCP fallback: answers here are a few addresses); names
    in the answer are not decompressed beyond what A records need. The kubernetes plugin also
    watches Namespaces, which the pool cache does not cache: they are forwarded to the cloud, so
    a CoreDNS must start while its node reaches the cloud (its informer then keeps the namespaces
    it listed while cut off); one (re)started while cut off answers SERVFAIL until it can list them.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ipaddress
import os
import random
import signal
import socket
import struct
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgewatch_lab.testing.kubeproxy import run_in_netns

__all__ = ["COREDNS_RULES", "CoreDNS", "CoreDNSCredentials", "CoreDNSError", "DnsAnswer", "coredns_credentials", "decode_answer",
           "encode_query"]

COREDNS_RULES: list[dict[str, Any]] = [
    {"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"], "verbs": ["list", "watch"]},
    {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
]
"""kubeadm's ClusterRole ``system:coredns`` (cmd/kubeadm/app/phases/addons/dns/manifests.go, v1.36)."""

_PR_SET_PDEATHSIG = 1
_TYPE_A, _CLASS_IN = 1, 1


class CoreDNSError(RuntimeError):
    """CoreDNS did not start or did not get ready (the message has its log tail)."""


# --------------------------------------------------------------------------- DNS messages (pure)


@dataclass(frozen=True)
class DnsAnswer:
    """A decoded response: ``rcode`` (0 NOERROR, 2 SERVFAIL, 3 NXDOMAIN, ...) and the A records'
    addresses in answer order."""

    rcode: int
    addresses: tuple[str, ...]


def encode_query(name: str, *, query_id: int) -> bytes:
    """A standard query (RD set) for the A records of ``name`` (RFC 1035 section 4.1).

    Raises:
        ValueError: a label empty or over 63 bytes, the name over 253 bytes, or ``query_id``
            out of 0..65535.
    """
    if not 0 <= query_id <= 0xFFFF:
        raise ValueError("query_id must be 0..65535")
    labels = name.rstrip(".").split(".")
    if len(name.rstrip(".")) > 253 or any(not 0 < len(label.encode()) <= 63 for label in labels):
        raise ValueError(f"not a DNS name: {name!r}")
    qname = b"".join(bytes([len(label.encode())]) + label.encode() for label in labels) + b"\0"
    return struct.pack("!HHHHHH", query_id, 0x0100, 1, 0, 0, 0) + qname + struct.pack("!HH", _TYPE_A, _CLASS_IN)


def _skip_name(packet: bytes, offset: int) -> int:
    """The offset after the (possibly compressed) name at ``offset``."""
    for _ in range(128):
        if offset >= len(packet):
            raise ValueError("name runs past the message")
        length = packet[offset]
        if length == 0:
            return offset + 1
        if length & 0xC0 == 0xC0:
            return offset + 2
        offset += 1 + length
    raise ValueError("name too long")


def decode_answer(packet: bytes, *, query_id: int) -> DnsAnswer:
    """The rcode and A addresses of a response to the query ``query_id`` (untrusted input).

    Raises:
        ValueError: shorter than a header, not a response, another id, truncated records.
    """
    if len(packet) < 12:
        raise ValueError("shorter than a DNS header")
    qid, flags, qdcount, ancount, _, _ = struct.unpack("!HHHHHH", packet[:12])
    if qid != query_id or not flags & 0x8000:
        raise ValueError("not the response to our query")
    offset = 12
    for _ in range(qdcount):
        offset = _skip_name(packet, offset) + 4
    addresses = []
    for _ in range(ancount):
        offset = _skip_name(packet, offset)
        if offset + 10 > len(packet):
            raise ValueError("truncated record")
        rtype, rclass, _ttl, rdlength = struct.unpack("!HHIH", packet[offset:offset + 10])
        offset += 10
        if offset + rdlength > len(packet):
            raise ValueError("truncated record data")
        if rtype == _TYPE_A and rclass == _CLASS_IN and rdlength == 4:
            addresses.append(str(ipaddress.IPv4Address(packet[offset:offset + 4])))
        offset += rdlength
    return DnsAnswer(flags & 0x000F, tuple(addresses))


def _ask_udp(server: tuple[str, int], name: str, timeout_s: float) -> DnsAnswer:
    query_id = random.randrange(0x10000)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(timeout_s)
        sock.connect(server)
        sock.send(encode_query(name, query_id=query_id))
        while True:  # a stray datagram (another id) is skipped; the socket timeout bounds the wait
            try:
                return decode_answer(sock.recv(4096), query_id=query_id)
            except ValueError:
                continue


# --------------------------------------------------------------------------- credentials


@dataclass(frozen=True)
class CoreDNSCredentials:
    """A bearer token of ServiceAccount ``kube-system/coredns``, in ``token_file`` (mode 0600)."""

    token: str
    token_file: Path


async def coredns_credentials(*, client: Any, token_file: Path, expiration_s: int = 3600,
                              timeout_s: float = 30.0) -> CoreDNSCredentials:
    """Create (idempotently) ServiceAccount ``kube-system/coredns``, ClusterRole ``system:coredns``
    (:data:`COREDNS_RULES`) and its ClusterRoleBinding, as kubeadm does, then request a token
    (TokenRequest, ``expiration_s`` seconds) and write it to ``token_file``.

    Args:
        client: an admin lightkube ``AsyncClient``.
        timeout_s: bound on the API calls together, seconds.

    Raises:
        lightkube.ApiError: a call failed (other than "already exists"); TimeoutError.
    """
    from lightkube import ApiError, codecs
    from lightkube.models.authentication_v1 import TokenRequestSpec
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.core_v1 import ServiceAccountToken

    async def create_missing(doc: dict[str, Any]) -> None:
        try:
            await client.create(codecs.from_dict(doc))
        except ApiError as exc:
            if exc.status.code != 409:
                raise

    async def issue() -> str:
        await create_missing({"apiVersion": "v1", "kind": "ServiceAccount",
                              "metadata": {"name": "coredns", "namespace": "kube-system"}})
        await create_missing({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                              "metadata": {"name": "system:coredns"}, "rules": COREDNS_RULES})
        await create_missing({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                              "metadata": {"name": "system:coredns"},
                              "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                          "name": "system:coredns"},
                              "subjects": [{"kind": "ServiceAccount", "name": "coredns", "namespace": "kube-system"}]})
        answer = await client.create(ServiceAccountToken(metadata=ObjectMeta(name="coredns"), spec=TokenRequestSpec(
            audiences=[], expirationSeconds=expiration_s)), "coredns", namespace="kube-system")
        return str(answer.status.token)

    token = await asyncio.wait_for(issue(), timeout_s)
    token_file.parent.mkdir(parents=True, exist_ok=True)
    token_file.touch(mode=0o600)
    token_file.chmod(0o600)
    token_file.write_text(token)
    return CoreDNSCredentials(token=token, token_file=token_file)


# --------------------------------------------------------------------------- the process


def _die_with_parent() -> None:
    ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


class CoreDNS:
    """One real CoreDNS inside network namespace ``netns`` (see the module docstring).

    Use as an async context manager (start on enter; SIGTERM, then SIGKILL after
    ``stop_timeout_s``, on exit)::

        async with CoreDNS(netns=ns, kubeconfig=kc, work_dir=d, binary=b) as dns:
            await dns.wait_ready(timeout_s=60)
            answer = await dns.resolve("web.default.svc.cluster.local", timeout_s=2)

    Args:
        netns: an existing network namespace (``ip netns`` name).
        kubeconfig: what the kubernetes plugin reads the API with (its server reachable from netns).
        work_dir: folder for ``Corefile`` and ``coredns.log``.
        binary: the coredns binary (:func:`edgewatch_lab.testing.binaries.ensure_coredns`).
        port: the DNS port on 127.0.0.1 inside ``netns``; health and ready are on 127.0.0.1 too.
        zone: the cluster domain.
        stop_timeout_s: grace between SIGTERM and SIGKILL, seconds.
    """

    def __init__(self, *, netns: str, kubeconfig: Path, work_dir: Path, binary: Path, port: int = 1053,
                 health_port: int = 18080, ready_port: int = 18181, zone: str = "cluster.local",
                 stop_timeout_s: float = 10.0) -> None:
        self.netns, self.kubeconfig, self.work_dir, self.binary = netns, kubeconfig, work_dir, binary
        self.port, self.health_port, self.ready_port, self.zone = port, health_port, ready_port, zone
        self.stop_timeout_s = stop_timeout_s
        self.corefile = work_dir / "Corefile"
        self.log_path = work_dir / "coredns.log"
        self._proc: asyncio.subprocess.Process | None = None

    async def __aenter__(self) -> CoreDNS:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def configuration(self) -> str:
        """The Corefile: the zone from the kubernetes plugin (TTL 0: every answer is current),
        reverse zones falling through, nothing forwarded anywhere."""
        return (f".:{self.port} {{\n"
                f"    bind 127.0.0.1\n"
                f"    errors\n"
                f"    health 127.0.0.1:{self.health_port}\n"
                f"    ready 127.0.0.1:{self.ready_port}\n"
                f"    kubernetes {self.zone} in-addr.arpa ip6.arpa {{\n"
                f"        kubeconfig {self.kubeconfig}\n"
                f"        ttl 0\n"
                f"        fallthrough in-addr.arpa ip6.arpa\n"
                f"    }}\n"
                f"}}\n")

    async def start(self) -> None:
        """Write the Corefile and start CoreDNS (returns at once; see :meth:`wait_ready`).

        Raises:
            CoreDNSError: not root (``ip netns exec`` needs it).
        """
        if os.geteuid() != 0:
            raise CoreDNSError("CoreDNS in a network namespace needs root")
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.corefile.write_text(self.configuration())
        with open(self.log_path, "ab") as log:
            self._proc = await asyncio.create_subprocess_exec(
                "ip", "netns", "exec", self.netns, str(self.binary), "-conf", str(self.corefile),
                stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                preexec_fn=_die_with_parent)

    async def wait_ready(self, *, timeout_s: float) -> None:
        """Wait until the ready plugin answers 200 (the kubernetes plugin has synced).

        Raises:
            CoreDNSError: it exited, or was not ready within ``timeout_s`` seconds (log tail).
        """
        url = f"http://127.0.0.1:{self.ready_port}/ready"

        def probe() -> bool:
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:
                    return bool(resp.status == 200)
            except (urllib.error.URLError, OSError):
                return False

        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while loop.time() < deadline:
            if self._proc is not None and self._proc.returncode is not None:
                raise CoreDNSError(f"CoreDNS exited ({self._proc.returncode}): {self.log_tail()}")
            with contextlib.suppress(TimeoutError):
                if await run_in_netns(self.netns, probe, timeout_s=5):
                    return
            await asyncio.sleep(0.5)
        raise CoreDNSError(f"CoreDNS not ready after {timeout_s} s: {self.log_tail()}")

    async def resolve(self, name: str, *, timeout_s: float = 2.0) -> DnsAnswer:
        """The A records of ``name`` as this CoreDNS answers them (a UDP query from inside netns).

        Raises:
            TimeoutError, OSError: no answer within ``timeout_s`` seconds.
        """
        server = ("127.0.0.1", self.port)
        return await run_in_netns(self.netns, lambda: _ask_udp(server, name, timeout_s), timeout_s=timeout_s + 1)

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of CoreDNS's log."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    async def stop(self) -> None:
        """SIGTERM CoreDNS's process group, SIGKILL after ``stop_timeout_s``, reap. Safe twice."""
        proc, self._proc = self._proc, None
        if proc is None or proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), self.stop_timeout_s)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()

"""A real kube-proxy for one lab node, confined to the node's network namespace.

``KubeProxy`` runs the upstream kube-proxy binary (built by ``hack/binaries/build.sh``, see
``edgewatch_lab.testing.binaries``) inside an existing network namespace through ``ip netns exec``,
with a KubeProxyConfiguration written to its work folder, and reads back what it programmed:
``service_backends()`` maps each Service port to the endpoint addresses it load-balances to, read
from the namespace's own nftables (or iptables) ruleset by the parsers of
``edgewatch_lab.testing.kubeproxy_rules``. ``kube_proxy_credentials()`` gives it an
identity (ServiceAccount ``kube-system/kube-proxy`` bound to ``system:node-proxier``, a bearer
token); ``write_token_kubeconfig()`` points that token at any server, e.g. an edgewatch agent
serving on ``https://127.0.0.1:<port>`` inside the node namespace. ``NetnsTcpRelay`` serves a port
on a namespace's loopback and forwards it to an address of the caller's namespace (how a lab node
reaches a control plane that listens on the root namespace's 127.0.0.1).

Host-wide effects of kube-proxy at start, found in its source (v1.36: cmd/kube-proxy/app/
server.go, server_linux.go, pkg/proxy/conntrack/sysctls.go, pkg/proxy/{nftables,iptables,ipvs}),
and what this module does about each:

* conntrack sysctls ``net.netfilter.nf_conntrack_max`` (from ``conntrack.maxPerCore``/``min``)
  and ``/sys/module/nf_conntrack/parameters/hashsize`` (global, not per namespace), and
  ``nf_conntrack_tcp_timeout_established``/``_close_wait``, ``nf_conntrack_tcp_be_liberal``,
  ``nf_conntrack_udp_timeout``/``_stream``: every one is skipped when its setting is 0/false,
  and the configuration sets them all so (``maxPerCore: 0``, ``min: 0``, the timeouts ``0s``,
  ``tcpBeLiberal: false``);
* ``modprobe -va ip_vs`` (nftables mode, before cleaning up ipvs leftovers; loads a kernel module
  for the whole machine): ``modprobe`` on kube-proxy's PATH is a stub in ``work_dir/bin`` that
  fails, so kube-proxy skips the ipvs cleanup;
* iptables/ipvs/ipset leftover cleanup (nftables mode) and nftables cleanup (iptables mode): act
  on the namespace's own tables only; in nftables mode the iptables tools are stubbed too, so a
  fresh namespace is not touched through them at all;
* ``net.ipv4.conf.all.route_localnet=1`` (iptables mode, for NodePorts on 127.0.0.1): per
  namespace anyway, and not written: ``nodePortAddresses`` is the node's address only and
  ``iptables.localhostNodePorts`` false;
* its own ``oom_score_adj`` (default -999, makes it the last victim of the machine's OOM killer):
  ``oomScoreAdj: 0``;
* rules (nftables table ``ip kube-proxy``/``ip6 kube-proxy``, or iptables chains), conntrack
  entry deletion and nfacct counters: all per network namespace; they go with the namespace;
* healthz and metrics servers: bound to 127.0.0.1 inside the namespace;
* reads only: ``/proc/sys/net/ipv6/conf/all/disable_ipv6``, CPU topology under ``/sys``, the
  kernel version. The kernel may still load nftables expression modules (numgen, nat, ...) on
  first use, as for any nft user; nothing here can stop that, and it changes no behaviour.

Limits: IPv4 only (``service_backends`` reads ``ip kube-proxy``, not ``ip6``); needs root, ``ip``,
``nft`` (and ``iptables-save`` for iptables mode); only ClusterIP load balancing is read back
(NodePorts, external IPs and load balancers are ignored); a Service port without ready endpoints
is absent from the map, not present with an empty set.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ctypes
import os
import shutil
import signal
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml

from edgewatch_lab.testing.binaries import ensure_binaries
from edgewatch_lab.testing.kubeproxy_rules import parse_iptables_save, parse_nft_ruleset

_T = TypeVar("_T")
_CLONE_NEWNET = 0x40000000
_PR_SET_PDEATHSIG = 1
DEFAULT_CONTENT_TYPE = "application/vnd.kubernetes.protobuf"  # kube-proxy's own default


class KubeProxyError(RuntimeError):
    """kube-proxy did not start, exited, or did not program what was expected (message: log tail)."""


# --------------------------------------------------------------------------- namespaces


def _enter_netns(netns: str) -> None:
    """Move the calling thread (only it) into ``netns`` (``/run/netns/<netns>``)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/run/netns/{netns}", os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({netns}): {os.strerror(err)}")
    finally:
        os.close(fd)


async def run_in_netns(netns: str, fn: Callable[[], _T], *, timeout_s: float) -> _T:
    """Run blocking ``fn`` in a fresh thread that has entered ``netns`` (the thread ends with it,
    so no pooled thread is ever left in another namespace). Sockets ``fn`` creates belong to
    ``netns`` for their whole life, whichever thread uses them later.

    Raises:
        TimeoutError: ``fn`` took longer than ``timeout_s`` seconds (it keeps running in its
            daemon thread; give it its own timeouts).
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[_T] = loop.create_future()

    def deliver(result: Any, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    def work() -> None:
        try:
            _enter_netns(netns)
            result = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine
            loop.call_soon_threadsafe(deliver, None, exc)
        else:
            loop.call_soon_threadsafe(deliver, result, None)

    threading.Thread(target=work, name=f"netns-{netns}", daemon=True).start()
    return await asyncio.wait_for(future, timeout_s)


class NetnsTcpRelay:
    """Serve ``127.0.0.1:<port>`` inside ``netns`` and relay each connection, byte for byte, to
    ``target_host:target_port`` as reached from the caller's namespace (TLS passes through, so a
    certificate for 127.0.0.1 stays valid). An async context manager; ``port`` is known once
    entered.

    Args:
        netns: the namespace to serve in.
        target_host, target_port: where to connect, from the caller's namespace.
        listen_port: the port inside ``netns``; 0 lets the kernel choose.
        connect_timeout_s: bound on each connection to the target, in seconds.
    """

    def __init__(self, *, netns: str, target_host: str, target_port: int, listen_port: int = 0,
                 connect_timeout_s: float = 10.0) -> None:
        self.netns, self.target = netns, (target_host, target_port)
        self.port = listen_port
        self._connect_timeout_s = connect_timeout_s
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> NetnsTcpRelay:
        def listen() -> socket.socket:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", self.port))
            sock.listen(64)
            sock.setblocking(False)
            return sock

        sock = await run_in_netns(self.netns, listen, timeout_s=10)
        self.port = sock.getsockname()[1]
        self._server = await asyncio.start_server(self._serve, sock=sock)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            up_r, up_w = await asyncio.wait_for(asyncio.open_connection(*self.target), self._connect_timeout_s)
        except (OSError, TimeoutError):
            writer.close()
            self._tasks.discard(task)
            return

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            with contextlib.suppress(OSError):
                dst.close()

        try:
            await asyncio.gather(pipe(reader, up_w), pipe(up_r, writer))
        finally:
            for w in (writer, up_w):
                w.close()
            self._tasks.discard(task)


# --------------------------------------------------------------------------- credentials


def token_kubeconfig(*, server_url: str, ca_pem: bytes, token: str) -> str:
    """The text of a kubeconfig that authenticates with a bearer ``token`` to ``server_url``,
    trusting ``ca_pem``. Use it to point kube-proxy at any server that serves the API, e.g. an
    agent on ``https://127.0.0.1:<port>`` inside the node namespace that forwards what it does
    not answer with the caller's own ``Authorization`` header.

    The server must be ``https://``: client-go drops the token from an ``http://`` server's
    requests (seen with kube-proxy v1.36: no ``Authorization`` header at all). What kube-proxy
    sends (v1.36, default ``contentType``): ``Accept: application/vnd.kubernetes.protobuf, */*``
    on GETs and watches, decoding whatever ``Content-Type`` the answer has (JSON works);
    Event POSTs have protobuf bodies; watches first try the streaming list
    (``sendInitialEvents=true``) and fall back to list + watch when that fails."""
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "cluster", "cluster": {
            "server": server_url, "certificate-authority-data": base64.b64encode(ca_pem).decode()}}],
        "users": [{"name": "kube-proxy", "user": {"token": token}}],
        "contexts": [{"name": "kube-proxy", "context": {"cluster": "cluster", "user": "kube-proxy"}}],
        "current-context": "kube-proxy",
    })


def write_token_kubeconfig(*, path: Path, server_url: str, ca_pem: bytes, token: str) -> Path:
    """Write ``token_kubeconfig(...)`` to ``path`` (mode 0600, set before the token is written)."""
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_text(token_kubeconfig(server_url=server_url, ca_pem=ca_pem, token=token))
    return path


@dataclass(frozen=True)
class KubeProxyCredentials:
    """A bearer token of ServiceAccount ``kube-system/kube-proxy`` and a kubeconfig using it."""

    token: str
    kubeconfig: str  # the kubeconfig's text (also written to the path given, if any)


async def kube_proxy_credentials(*, client: Any, server_url: str, ca_pem: bytes, path: Path | None = None,
                                 expiration_s: int = 3600, timeout_s: float = 30.0) -> KubeProxyCredentials:
    """Create (idempotently) ServiceAccount ``kube-system/kube-proxy``, bind it to the built-in
    ClusterRole ``system:node-proxier`` (ClusterRoleBinding ``edgewatch-lab:node-proxier``), and
    request a token for it (TokenRequest, ``expiration_s`` seconds; the apiserver may shorten it).

    Args:
        client: an admin lightkube ``AsyncClient``.
        server_url: the ``server`` of the kubeconfig (need not be the apiserver ``client`` uses).
        ca_pem: the CA certificate(s) the kubeconfig trusts.
        path: where to write the kubeconfig too (mode 0600), if given.
        timeout_s: bound on the three API calls together, in seconds.
    """
    from lightkube import ApiError
    from lightkube.models.authentication_v1 import TokenRequestSpec
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.models.rbac_v1 import RoleRef, Subject
    from lightkube.resources.core_v1 import ServiceAccount, ServiceAccountToken
    from lightkube.resources.rbac_authorization_v1 import ClusterRoleBinding

    async def create_missing(obj: Any) -> None:
        try:
            await client.create(obj)
        except ApiError as exc:
            if exc.status.code != 409:
                raise

    async def issue() -> str:
        await create_missing(ServiceAccount(metadata=ObjectMeta(name="kube-proxy", namespace="kube-system")))
        await create_missing(ClusterRoleBinding(
            metadata=ObjectMeta(name="edgewatch-lab:node-proxier"),
            roleRef=RoleRef(apiGroup="rbac.authorization.k8s.io", kind="ClusterRole", name="system:node-proxier"),
            subjects=[Subject(kind="ServiceAccount", name="kube-proxy", namespace="kube-system")]))
        answer = await client.create(ServiceAccountToken(metadata=ObjectMeta(name="kube-proxy"), spec=TokenRequestSpec(
            audiences=[], expirationSeconds=expiration_s)), "kube-proxy", namespace="kube-system")
        return str(answer.status.token)

    token = await asyncio.wait_for(issue(), timeout_s)
    if path is not None:
        write_token_kubeconfig(path=path, server_url=server_url, ca_pem=ca_pem, token=token)
    return KubeProxyCredentials(token=token, kubeconfig=token_kubeconfig(server_url=server_url, ca_pem=ca_pem,
                                                                        token=token))


# --------------------------------------------------------------------------- the process


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL it when the thread that started it dies."""
    ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


_STUBBED_ALWAYS = ("modprobe",)
_STUBBED_NFTABLES = ("iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save",
                     "ip6tables-restore", "ipset")


class KubeProxy:
    """One real kube-proxy for node ``node_name``, running inside network namespace ``netns``.

    Use as an async context manager (start on enter; SIGTERM, then SIGKILL after
    ``stop_timeout_s``, and reap on exit)::

        async with KubeProxy(netns=ns, node_name="a-1", kubeconfig=kc, work_dir=d) as proxy:
            await proxy.wait_ready(timeout_s=60)
            print(await proxy.service_backends(timeout_s=10))

    Args:
        netns: an existing network namespace (``ip netns`` name); nothing outside it is changed.
        node_name: the Node kube-proxy reads (its own), via ``hostnameOverride``.
        kubeconfig: the kubeconfig kube-proxy uses; its server must be reachable from ``netns``.
        work_dir: folder for ``kube-proxy.yaml``, ``kube-proxy.log`` and the ``bin/`` stubs.
        mode: ``"nftables"`` (default) or ``"iptables"`` (needs iptables in the namespace).
        cluster_cidr: the pod CIDR (``detectLocalMode: ClusterCIDR``).
        node_ip: the node's address inside ``netns``; it bounds ``nodePortAddresses`` and is
            kube-proxy's ``bindAddress``. None: NodePorts listen on no address at all
            (``nodePortAddresses: [127.0.0.1/32]`` with localhost NodePorts off).
        metrics_port, healthz_port: served on 127.0.0.1 inside ``netns``.
        content_type: ``clientConnection.contentType``; kube-proxy then sends
            ``Accept: <content_type>, */*`` and decodes whatever Content-Type comes back (JSON
            included). ``"application/json"`` makes it ask for JSON.
        sync_period_s, min_sync_period_s: full resync and minimum interval between syncs, in
            seconds.
        binary: the kube-proxy binary (default: ``ensure_binaries().require_kube_proxy()``).
        verbosity: klog ``--v``.
        stop_timeout_s: grace between SIGTERM and SIGKILL on exit, in seconds.
    """

    def __init__(self, *, netns: str, node_name: str, kubeconfig: Path, work_dir: Path,
                 mode: Literal["nftables", "iptables"] = "nftables", cluster_cidr: str = "10.244.0.0/16",
                 node_ip: str | None = None, metrics_port: int = 10249, healthz_port: int = 10256,
                 content_type: str = DEFAULT_CONTENT_TYPE, sync_period_s: float = 30.0,
                 min_sync_period_s: float = 1.0, binary: Path | None = None, verbosity: int = 2,
                 stop_timeout_s: float = 10.0) -> None:
        if mode not in ("nftables", "iptables"):
            raise ValueError(f"mode must be nftables or iptables, got {mode!r}")
        self.netns, self.node_name, self.kubeconfig = netns, node_name, kubeconfig
        self.work_dir, self.mode, self.cluster_cidr, self.node_ip = work_dir, mode, cluster_cidr, node_ip
        self.metrics_port, self.healthz_port, self.content_type = metrics_port, healthz_port, content_type
        self.sync_period_s, self.min_sync_period_s = sync_period_s, min_sync_period_s
        self.binary, self.verbosity, self.stop_timeout_s = binary, verbosity, stop_timeout_s
        self.config_path = work_dir / "kube-proxy.yaml"
        self.log_path = work_dir / "kube-proxy.log"
        self._proc: asyncio.subprocess.Process | None = None

    # -- lifecycle -------------------------------------------------------------------------------

    async def __aenter__(self) -> KubeProxy:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def configuration(self) -> dict[str, Any]:
        """The KubeProxyConfiguration written to ``config_path`` (see the module docstring)."""
        sync = {"syncPeriod": f"{self.sync_period_s}s", "minSyncPeriod": f"{self.min_sync_period_s}s"}
        return {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
            "mode": self.mode, "hostnameOverride": self.node_name,
            "clientConnection": {"kubeconfig": str(self.kubeconfig), "contentType": self.content_type,
                                 "qps": 20, "burst": 40},
            "bindAddress": self.node_ip or "0.0.0.0",
            "healthzBindAddress": f"127.0.0.1:{self.healthz_port}",
            "metricsBindAddress": f"127.0.0.1:{self.metrics_port}",
            "clusterCIDR": self.cluster_cidr, "detectLocalMode": "ClusterCIDR",
            "nodePortAddresses": [f"{self.node_ip}/32" if self.node_ip else "127.0.0.1/32"],
            "oomScoreAdj": 0,
            "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s",
                          "tcpBeLiberal": False, "udpTimeout": "0s", "udpStreamTimeout": "0s"},
            "iptables": {**sync, "localhostNodePorts": False, "masqueradeAll": False},
            "nftables": {**sync, "masqueradeAll": False},
            "configSyncPeriod": "15m0s", "enableProfiling": False,
        }

    def _write_stubs(self) -> Path:
        bin_dir = self.work_dir / "bin"
        bin_dir.mkdir(parents=True, exist_ok=True)
        for name in _STUBBED_ALWAYS + (_STUBBED_NFTABLES if self.mode == "nftables" else ()):
            stub = bin_dir / name
            stub.write_text(f"#!/bin/sh\necho 'edgewatch lab: {name} is disabled for kube-proxy' >&2\nexit 1\n")
            stub.chmod(0o755)
        return bin_dir

    async def start(self) -> None:
        """Write the configuration and start kube-proxy (returns at once; see ``wait_ready``).

        Raises:
            KubeProxyError: not root, or ``ip``/``nft`` missing.
            BinariesError: no kube-proxy binary.
        """
        if os.geteuid() != 0:
            raise KubeProxyError("kube-proxy in a network namespace needs root")
        for tool in ("ip", "nft" if self.mode == "nftables" else "iptables-save"):
            if shutil.which(tool) is None:
                raise KubeProxyError(f"`{tool}` is not on PATH")
        argv, path = self.prepare()
        env = dict(os.environ, PATH=path)
        with open(self.log_path, "ab") as log:
            self._proc = await asyncio.create_subprocess_exec(
                "ip", "netns", "exec", self.netns, *argv, stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                start_new_session=True,  # own process group: killpg reaches anything it starts (nft)
                preexec_fn=_die_with_parent)

    def prepare(self) -> tuple[list[str], str]:
        """Write the configuration and the stub tools to ``work_dir``; return kube-proxy's argv and
        the ``PATH`` it must run with (stubs first). For callers that start it themselves, e.g. a
        real lab node's launcher (``edgewatch_lab.testing.realnode``).

        Raises:
            BinariesError: no kube-proxy binary.
        """
        binary = self.binary or ensure_binaries().require_kube_proxy()
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(yaml.safe_dump(self.configuration()))
        path = f"{self._write_stubs()}:{os.environ.get('PATH', '/usr/sbin:/usr/bin')}"
        return [str(binary), f"--config={self.config_path}", f"--v={self.verbosity}"], path

    async def stop(self) -> None:
        """SIGTERM kube-proxy's process group, SIGKILL after ``stop_timeout_s``, reap. Safe twice.
        Its rules stay in the namespace (they go with it)."""
        proc, self._proc = self._proc, None
        if proc is None or proc.returncode is not None:
            return
        for sig, wait_s in ((signal.SIGTERM, self.stop_timeout_s), (signal.SIGKILL, 10.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            try:
                await asyncio.wait_for(proc.wait(), wait_s)
                return
            except TimeoutError:
                continue

    @property
    def pid(self) -> int | None:
        """kube-proxy's pid while it runs (``ip netns exec`` execs in place)."""
        return self._proc.pid if self._proc is not None and self._proc.returncode is None else None

    def log_tail(self, lines: int = 30) -> str:
        """The last ``lines`` lines of ``kube-proxy.log`` (for failure messages)."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def _check_running(self) -> None:
        if self._proc is None:
            raise KubeProxyError("kube-proxy is not started")
        if self._proc.returncode is not None:
            raise KubeProxyError(f"kube-proxy exited with {self._proc.returncode}; log tail:\n{self.log_tail()}")

    # -- observation -----------------------------------------------------------------------------

    async def healthz(self, *, timeout_s: float = 5.0) -> tuple[int, str]:
        """GET ``/healthz`` on 127.0.0.1 inside the namespace: (HTTP status, body); status 0 when
        nothing answers."""
        url = f"http://127.0.0.1:{self.healthz_port}/healthz"

        def get() -> tuple[int, str]:
            opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
            try:
                with opener.open(url, timeout=timeout_s) as resp:
                    return int(resp.status), resp.read().decode(errors="replace")
            except urllib.error.HTTPError as exc:
                return int(exc.code), exc.read().decode(errors="replace")
            except OSError:
                return 0, ""

        return await run_in_netns(self.netns, get, timeout_s=timeout_s + 2)

    async def wait_ready(self, *, timeout_s: float = 60.0) -> None:
        """Wait until ``/healthz`` answers 200 (kube-proxy has synced its rules at least once).

        Raises:
            KubeProxyError: kube-proxy exited, or was not healthy within ``timeout_s`` seconds.
        """
        deadline = time.monotonic() + timeout_s
        last: tuple[int, str] = (0, "")
        while True:
            self._check_running()
            last = await self.healthz(timeout_s=min(5.0, max(0.5, deadline - time.monotonic())))
            if last[0] == 200:
                return
            if time.monotonic() >= deadline:
                raise KubeProxyError(f"kube-proxy in {self.netns} not healthy after {timeout_s} s "
                                     f"(last /healthz: {last[0]} {last[1][:300]!r}); log tail:\n{self.log_tail()}")
            await asyncio.sleep(0.3)

    async def ruleset(self, *, timeout_s: float = 10.0) -> str:
        """The raw ruleset kube-proxy programmed: ``nft -j list table ip kube-proxy`` (nftables)
        or ``iptables-save -t nat`` (iptables), run inside the namespace; "" when there is none
        yet."""
        argv = (["nft", "-j", "list", "table", "ip", "kube-proxy"] if self.mode == "nftables"
                else ["iptables-save", "-t", "nat"])
        proc = await asyncio.create_subprocess_exec(
            "ip", "netns", "exec", self.netns, *argv, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise KubeProxyError(f"{' '.join(argv)} in {self.netns} took over {timeout_s} s") from None
        if proc.returncode != 0:
            if b"No such file or directory" in err:  # the table does not exist yet
                return ""
            raise KubeProxyError(f"{' '.join(argv)} in {self.netns} failed: {err.decode(errors='replace')[:500]}")
        return out.decode()

    async def service_backends(self, *, timeout_s: float = 10.0) -> dict[str, set[str]]:
        """What kube-proxy load-balances now: ``"namespace/service:port-name"`` -> set of
        ``"ip:port"`` endpoints (see ``parse_nft_ruleset`` / ``parse_iptables_save``)."""
        text = await self.ruleset(timeout_s=timeout_s)
        if not text:
            return {}
        return parse_nft_ruleset(text) if self.mode == "nftables" else parse_iptables_save(text)

    async def wait_backends(self, key: str, expected: set[str], *, timeout_s: float = 60.0,
                            interval_s: float = 0.5) -> float:
        """Poll ``service_backends`` until ``key`` maps to exactly ``expected`` (an empty set
        means: absent); returns the seconds it took.

        Raises:
            KubeProxyError: kube-proxy exited, or the rules did not match within ``timeout_s``
                seconds (the message has what was seen and the log tail).
        """
        start = time.monotonic()
        seen: dict[str, set[str]] = {}
        while True:
            self._check_running()
            seen = await self.service_backends(timeout_s=10.0)
            if seen.get(key, set()) == expected:
                return time.monotonic() - start
            if time.monotonic() - start >= timeout_s:
                raise KubeProxyError(f"after {timeout_s} s, {key} -> {sorted(seen.get(key, set()))}, expected "
                                     f"{sorted(expected)} (all: {seen}); log tail:\n{self.log_tail()}")
            await asyncio.sleep(interval_s)

"""The container half of the kubelet simulator: run the pods of edgewatch's own image as local
processes, given exactly what a kubelet would give the container.

For every pod bound to the node whose containers use the edgewatch image (``image_prefix``), the
runner, like a kubelet:

- materializes the volumes — ``secret`` and ``configMap`` (from the API, with ``defaultMode``/item
  modes), ``projected`` (a ServiceAccount token from the TokenRequest API *bound to the pod*, so it
  carries the node claim; ``kube-root-ca.crt``; the namespace), ``downwardAPI``, ``hostPath``
  (under the node's own root folder, ``DirectoryOrCreate`` made by root 0755 as a kubelet does) and
  ``emptyDir`` — with ``fsGroup`` ownership (group set, group read added: kubelet's
  SetVolumeOwnership);
- builds the environment: literal values with ``$(VAR)`` expansion, the downward API
  (``fieldRef``), Secret and ConfigMap keys, and the ``KUBERNETES_SERVICE_*`` variables;
- runs init containers to completion, then the containers, under ``runAsUser``/``runAsGroup`` and
  ``fsGroup``/``supplementalGroups`` (``edgewatch_lab.testing.podexec`` does the namespace part);
- acts on liveness and readiness probes (``httpGet``, ``tcpSocket``), restarts exited containers
  with the kubelet's back-off (10 s doubling to 300 s), and reports it all in the pod's status;
- on deletion sends SIGTERM, waits ``terminationGracePeriodSeconds``, SIGKILLs, and deletes the pod.

Lab facts (documented, not hidden): there is no kube-proxy, so ``KUBERNETES_SERVICE_HOST``/``PORT``
name the apiserver's own address, as kube-proxy would route the ``kubernetes`` Service; only
``hostNetwork`` pods run (the lab has no pod network); a node's clock skew (``clock_dir``) reaches
its containers through libfaketime with the monotonic clock left alone.

Limits: no image pulls (the image is the host's Python and edgewatch), no cgroups or resource
limits, no exec probes, no token refresh (tokens live 1 h; runs are shorter), no subPath.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import contextlib
import json
import logging
import os
import re
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2 as httpx
from lightkube import ApiError

import edgewatch

log = logging.getLogger(__name__)

IMAGE_UID = 65532           # the Dockerfile's USER 65532:65532
IMAGE_GID = 65532
IMAGE_ENTRYPOINT = ("edgewatch",)
LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
CLOCK_MOUNT = "/run/edgewatch-lab-clock"
BACKOFF_START_S = 10.0
BACKOFF_MAX_S = 300.0
SETUP_RETRY_S = 2.0
_VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def format_rfc3339() -> str:
    """Now, as RFC 3339 to the second (metav1.Time)."""
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def read_clock_offset(clock_dir: Path | None) -> float:
    """The node's clock offset in seconds from ``<clock_dir>/faketime`` (libfaketime's relative
    form, ``+N``/``-N`` seconds); 0 when there is no file or it does not parse."""
    if clock_dir is None:
        return 0.0
    try:
        return float((clock_dir / "faketime").read_text().strip() or 0)
    except (OSError, ValueError):
        return 0.0


def write_clock_offset(clock_dir: Path, seconds: float) -> None:
    """Set the node's clock offset (seconds; 0 ends the skew) atomically, world-readable: the
    kubelet simulator and the node's containers (libfaketime, re-read every second) follow it."""
    clock_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(clock_dir, 0o755)
    tmp = clock_dir / ".faketime.tmp"
    tmp.write_text(f"{seconds:+.0f}\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, clock_dir / "faketime")


def restart_delay(restarts: int, *, ran_s: float) -> float:
    """Seconds before restarting a container that has exited ``restarts`` times (1 = the first
    exit) after running ``ran_s`` seconds: at once the first time, then 10 s doubling to 300 s
    (the kubelet's CrashLoopBackOff); a container that ran 10 minutes starts over."""
    if restarts <= 1 or ran_s > 600:
        return 0.0
    return min(BACKOFF_MAX_S, BACKOFF_START_S * 2 ** (restarts - 2))


class PodSetupError(RuntimeError):
    """A volume, env var or container of a pod could not be prepared (reported in its status)."""


@dataclass(frozen=True)
class PodRunnerConfig:
    """Where and how the runner runs containers.

    Attributes:
        node_name: the Node whose pods these are.
        node_address: the node's InternalIP (hostIP, and podIP of hostNetwork pods).
        node_root: the node's own root folder; hostPath volumes and pod folders live under it.
        image_prefix: an image whose name starts with this is edgewatch's and is run.
        apiserver_host, apiserver_port: what ``KUBERNETES_SERVICE_HOST``/``PORT`` say.
        clock_dir: folder holding the node's ``faketime`` file, or None (true clock).
        probe_timeout_cap_s: longest probe timeout, seconds.
    """

    node_name: str
    node_address: str
    node_root: Path
    image_prefix: str
    apiserver_host: str
    apiserver_port: int
    clock_dir: Path | None = None
    probe_timeout_cap_s: float = 5.0


def runs_here(pod: dict[str, Any], *, image_prefix: str) -> bool:
    """True if ``pod`` (a Pod as a dict) has a container of edgewatch's image."""
    spec = pod.get("spec") or {}
    return any((c.get("image") or "").startswith(image_prefix)
               for c in (spec.get("containers") or []) + (spec.get("initContainers") or []))


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion: known names are replaced, unknown ones left as they are,
    ``$$`` escapes a dollar."""
    def one(m: re.Match[str]) -> str:
        return "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0))

    return _VAR_REF.sub(one, text)


def field_value(pod: dict[str, Any], path: str, *, host_ip: str) -> str:
    """The downward API value of ``path`` (``metadata.name``, ``spec.nodeName``, ``status.hostIP``,
    ``metadata.labels['k']`` ...).

    Raises:
        PodSetupError: an unsupported field path.
    """
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    simple = {"metadata.name": meta.get("name"), "metadata.namespace": meta.get("namespace"),
              "metadata.uid": meta.get("uid"), "spec.nodeName": spec.get("nodeName"),
              "spec.serviceAccountName": spec.get("serviceAccountName"), "status.hostIP": host_ip,
              "status.podIP": host_ip}
    if path in simple:
        return str(simple[path] or "")
    m = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
    if m:
        return str((meta.get(m.group(1)) or {}).get(m.group(2), ""))
    raise PodSetupError(f"unsupported fieldRef {path!r}")


def file_mode(mode: int, *, fs_group: int | None) -> int:
    """A read-only volume file's mode after kubelet's SetVolumeOwnership: with an fsGroup the group
    gets read (``mode | 0o440``); without, the mode as given."""
    return mode | 0o440 if fs_group is not None else mode


def _write(path: Path, data: bytes, *, mode: int, fs_group: int | None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.chown(path, 0, fs_group if fs_group is not None else 0)
    os.chmod(path, file_mode(mode, fs_group=fs_group))


@dataclass
class _Container:
    spec: dict[str, Any]
    init: bool = False
    proc: asyncio.subprocess.Process | None = None
    restarts: int = 0
    ready: bool = False
    started_at: str | None = None
    waiting: str | None = None
    last_exit: int | None = None
    live_failures: int = 0
    startup_failures: int = 0
    startup_ok: bool = False
    started_mono: float | None = None
    ready_streak: int = 0
    unready_streak: int = 0


@dataclass
class _Pod:
    uid: str
    pod: dict[str, Any]
    containers: dict[str, _Container] = field(default_factory=dict)
    mounts_by_volume: dict[str, Path] = field(default_factory=dict)
    deleting: bool = False
    initialized: bool = False
    error: str | None = None
    task: asyncio.Task[None] | None = None


class PodRunner:
    """Runs the edgewatch-image pods of one node. ``sync(pod)`` on every pod event; ``run()`` keeps
    the status writer going; ``stop_all()`` on shutdown.

    Args:
        client: the kubelet's API client (reads Secrets/ConfigMaps, TokenRequest, pod status).
        config: see ``PodRunnerConfig``.
    """

    def __init__(self, *, client: Any, config: PodRunnerConfig) -> None:
        self.client = client
        self.config = config
        self.pods: dict[str, _Pod] = {}
        self._tg: asyncio.TaskGroup | None = None

    async def run(self) -> None:
        """Own the per-pod tasks until cancelled; then stop every container."""
        try:
            async with asyncio.TaskGroup() as tg:
                self._tg = tg
                await asyncio.Event().wait()
        finally:
            self._tg = None
            await self.stop_all()

    async def sync(self, pod_obj: Any) -> None:
        """React to one pod event (the pod as lightkube returned it)."""
        pod = pod_obj.to_dict()
        uid = pod["metadata"]["uid"]
        if self._tg is None:
            return
        state = self.pods.get(uid)
        if pod["metadata"].get("deletionTimestamp"):
            if state is None:
                await self._delete(pod)
            elif not state.deleting:
                state.deleting = True
                self._tg.create_task(self._terminate(state))
            return
        if state is None:
            state = _Pod(uid=uid, pod=pod)
            self.pods[uid] = state
            state.task = self._tg.create_task(self._run_pod(state))
        else:
            state.pod = pod

    async def forget(self, pod_obj: Any) -> None:
        """The pod is gone from the API (force-deleted): stop its containers, keep nothing."""
        state = self.pods.pop(pod_obj.metadata.uid, None)
        if state is not None:
            state.deleting = True
            await asyncio.gather(*(self._kill(c, grace_s=2.0) for c in state.containers.values()))
            if state.task is not None:
                state.task.cancel()

    # -- one pod ------------------------------------------------------------------------------------

    async def _run_pod(self, p: _Pod) -> None:
        spec = p.pod["spec"]
        try:
            if not spec.get("hostNetwork"):
                raise PodSetupError("the lab has no pod network: only hostNetwork pods of the edgewatch image run")
            while True:  # like a kubelet's FailedMount: retry until the volumes can be set up
                try:
                    await self._prepare_volumes(p)
                    p.error = None
                    break
                except (PodSetupError, ApiError, httpx.HTTPError, OSError) as exc:
                    p.error = f"volumes: {exc}"
                    log.info("pod %s: %s; retrying in %.0f s", p.pod["metadata"]["name"], p.error, SETUP_RETRY_S)
                    await self._post_status(p)
                    await asyncio.sleep(SETUP_RETRY_S)
            for c in spec.get("initContainers") or []:
                p.containers[c["name"]] = _Container(spec=c, init=True)
            for c in spec.get("containers") or []:
                p.containers[c["name"]] = _Container(spec=c)
            await self._post_status(p)
            for c in [x for x in p.containers.values() if x.init]:
                while not p.deleting:
                    code = await self._start_and_wait(p, c)
                    if code == 0:
                        break
                    c.restarts += 1
                    c.waiting = "CrashLoopBackOff"
                    await self._post_status(p)
                    await asyncio.sleep(min(BACKOFF_MAX_S, BACKOFF_START_S * 2 ** (c.restarts - 1)))
            p.initialized = True
            async with asyncio.TaskGroup() as tg:
                for c in [x for x in p.containers.values() if not x.init]:
                    tg.create_task(self._supervise(p, c))
                    tg.create_task(self._probe_loop(p, c))
        except PodSetupError as exc:
            p.error = str(exc)
            log.warning("pod %s/%s: %s", p.pod["metadata"]["namespace"], p.pod["metadata"]["name"], exc)
            await self._post_status(p)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 — a broken pod must not take the node down
            p.error = f"{type(exc).__name__}: {exc}"
            log.exception("pod %s: runner failed", p.pod["metadata"]["name"])
            with contextlib.suppress(Exception):
                await self._post_status(p)

    async def _supervise(self, p: _Pod, c: _Container) -> None:
        while not p.deleting:
            started = asyncio.get_running_loop().time()
            code = await self._start_and_wait(p, c)
            if p.deleting:
                return
            c.last_exit = code
            c.ready = False
            c.restarts += 1
            ran = asyncio.get_running_loop().time() - started
            delay = restart_delay(c.restarts, ran_s=ran)
            c.waiting = "CrashLoopBackOff" if delay else None
            log.info("pod %s: container %s exited %s; restart in %.0f s", p.pod["metadata"]["name"],
                     c.spec["name"], code, delay)
            await self._post_status(p)
            await asyncio.sleep(delay)

    async def _start_and_wait(self, p: _Pod, c: _Container) -> int:
        spec_file = self._pod_dir(p) / f"{c.spec['name']}.exec.json"
        spec_file.write_text(json.dumps(await self._exec_spec(p, c)))
        log_dir = self.config.node_root / "var/log/pods" / f"{p.pod['metadata']['namespace']}_{p.pod['metadata']['name']}_{p.uid}" / c.spec["name"]
        log_dir.mkdir(parents=True, exist_ok=True)
        with open(log_dir / f"{c.restarts}.log", "ab") as out:
            c.proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "edgewatch_lab.testing.podexec", str(spec_file),
                stdout=out, stderr=asyncio.subprocess.STDOUT, stdin=asyncio.subprocess.DEVNULL)
        c.started_at = format_rfc3339()
        c.started_mono = asyncio.get_running_loop().time()
        c.waiting = None
        c.live_failures = c.ready_streak = c.unready_streak = c.startup_failures = 0
        c.startup_ok = "startupProbe" not in c.spec
        c.ready = not c.init and "readinessProbe" not in c.spec
        await self._post_status(p)
        code = await c.proc.wait()
        c.proc = None
        return code

    async def _probe_loop(self, p: _Pod, c: _Container) -> None:
        """The container's probes, each on its own period (kubelet semantics): the startup probe
        first (liveness and readiness wait for it; failureThreshold failures kill the container),
        then readiness (Ready after successThreshold successes, unready after failureThreshold
        failures) and liveness (failureThreshold failures in a row kill the container)."""
        startup, ready, live = (c.spec.get(k) for k in ("startupProbe", "readinessProbe", "livenessProbe"))
        grace = float(p.pod["spec"].get("terminationGracePeriodSeconds", 30))

        async def on_startup(ok: bool) -> None:
            c.startup_failures = 0 if ok else c.startup_failures + 1
            if ok:
                c.startup_ok = True
            elif c.startup_failures >= int(startup.get("failureThreshold", 3)):
                log.info("pod %s: container %s failed its startup probe; killing it",
                         p.pod["metadata"]["name"], c.spec["name"])
                await self._kill(c, grace_s=grace)

        async def on_ready(ok: bool) -> None:
            c.ready_streak, c.unready_streak = (c.ready_streak + 1, 0) if ok else (0, c.unready_streak + 1)
            was = c.ready
            if ok and c.ready_streak >= int(ready.get("successThreshold", 1)):
                c.ready = True
            elif not ok and c.unready_streak >= int(ready.get("failureThreshold", 3)):
                c.ready = False
            if was != c.ready:
                await self._post_status(p)

        async def on_live(ok: bool) -> None:
            c.live_failures = 0 if ok else c.live_failures + 1
            if c.live_failures >= int(live.get("failureThreshold", 3)):
                log.info("pod %s: container %s failed liveness; killing it", p.pod["metadata"]["name"], c.spec["name"])
                await self._kill(c, grace_s=grace)

        async with asyncio.TaskGroup() as tg:
            if startup:
                tg.create_task(self._every(p, c, startup, on_startup, phase="startup"))
            if ready:
                tg.create_task(self._every(p, c, ready, on_ready, phase="after-startup"))
            if live:
                tg.create_task(self._every(p, c, live, on_live, phase="after-startup"))

    async def _every(self, p: _Pod, c: _Container, probe: dict[str, Any], on_result: Any, *, phase: str) -> None:
        period = float(probe.get("periodSeconds", 10))
        delay = float(probe.get("initialDelaySeconds", 0))
        loop = asyncio.get_running_loop()
        while not p.deleting:
            await asyncio.sleep(period)
            if c.proc is None or c.started_mono is None or loop.time() - c.started_mono < delay:
                continue
            if (phase == "startup") == c.startup_ok:  # startup probes until it passes; others after
                continue
            await on_result(await self._probe(probe))

    async def _probe(self, probe: dict[str, Any]) -> bool:
        timeout = min(float(probe.get("timeoutSeconds", 1)), self.config.probe_timeout_cap_s)
        host = self.config.node_address
        try:
            if "httpGet" in probe:
                get = probe["httpGet"]
                port = int(get["port"])
                reader, writer = await asyncio.wait_for(asyncio.open_connection(get.get("host") or host, port), timeout)
                try:
                    writer.write(f"GET {get.get('path', '/')} HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
                    await writer.drain()
                    line = await asyncio.wait_for(reader.readline(), timeout)
                finally:
                    writer.close()
                parts = line.split()
                return len(parts) >= 2 and 200 <= int(parts[1]) < 400
            if "tcpSocket" in probe:
                _r, writer = await asyncio.wait_for(
                    asyncio.open_connection(host, int(probe["tcpSocket"]["port"])), timeout)
                writer.close()
                return True
        except (OSError, asyncio.TimeoutError, ValueError):
            return False
        return True

    async def _kill(self, c: _Container, *, grace_s: float) -> None:
        proc = c.proc
        if proc is None or proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), grace_s)
        except asyncio.TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()

    async def _terminate(self, p: _Pod) -> None:
        grace = float(p.pod["spec"].get("terminationGracePeriodSeconds", 30))
        await asyncio.gather(*(self._kill(c, grace_s=grace) for c in p.containers.values()))
        if p.task is not None:
            p.task.cancel()
        await self._delete(p.pod)
        self.pods.pop(p.uid, None)

    async def stop_all(self) -> None:
        """Stop every container (SIGTERM, then SIGKILL after 2 s): the lab's node is going away."""
        await asyncio.gather(*(self._kill(c, grace_s=2.0) for p in self.pods.values() for c in p.containers.values()),
                             return_exceptions=True)

    async def _delete(self, pod: dict[str, Any]) -> None:
        from lightkube import ApiError
        from lightkube.resources.core_v1 import Pod

        meta = pod["metadata"]
        with contextlib.suppress(ApiError):
            await self.client.delete(Pod, meta["name"], namespace=meta["namespace"], grace_period=0)

    # -- what the container gets --------------------------------------------------------------------

    def _pod_dir(self, p: _Pod) -> Path:
        d = self.config.node_root / "var/lib/kubelet/pods" / p.uid
        d.mkdir(parents=True, exist_ok=True)
        return d

    async def _get(self, kind: str, name: str, namespace: str) -> dict[str, Any]:
        from lightkube import ApiError
        from lightkube.resources.core_v1 import ConfigMap, Secret

        resource = Secret if kind == "Secret" else ConfigMap
        try:
            return (await self.client.get(resource, name, namespace=namespace)).to_dict()
        except ApiError as exc:
            raise PodSetupError(f"{kind} {namespace}/{name}: {exc.status.message}") from exc

    async def _token(self, p: _Pod, source: dict[str, Any]) -> bytes:
        from lightkube.resources.core_v1 import ServiceAccount

        meta, spec = p.pod["metadata"], p.pod["spec"]
        body = ServiceAccount.Token.from_dict({
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "metadata": {},
            "spec": {"audiences": [source["audience"]] if source.get("audience") else None,
                     "expirationSeconds": int(source.get("expirationSeconds", 3607)),
                     "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}}})
        out = await self.client.create(body, spec.get("serviceAccountName", "default"), namespace=meta["namespace"])
        return out.status.token.encode()

    async def _items(self, kind: str, src: dict[str, Any], namespace: str) -> list[tuple[str, bytes, int | None]]:
        obj = await self._get(kind, src["name"], namespace)
        data = {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()} if kind == "Secret" \
            else {k: v.encode() for k, v in (obj.get("data") or {}).items()}
        if src.get("items"):
            return [(i["path"], data[i["key"]], i.get("mode")) for i in src["items"] if i["key"] in data]
        return [(k, v, None) for k, v in data.items()]

    async def _prepare_volumes(self, p: _Pod) -> None:
        spec, meta = p.pod["spec"], p.pod["metadata"]
        fs_group = (spec.get("securityContext") or {}).get("fsGroup")
        base = self._pod_dir(p) / "volumes"
        for vol in spec.get("volumes") or []:
            name = vol["name"]
            target = base / name
            if "hostPath" in vol:
                path = self.config.node_root / vol["hostPath"]["path"].lstrip("/")
                kind = vol["hostPath"].get("type", "")
                if kind == "DirectoryOrCreate":
                    path.mkdir(parents=True, exist_ok=True, mode=0o755)
                elif kind == "Directory" and not path.is_dir():
                    raise PodSetupError(f"hostPath {vol['hostPath']['path']} is not a directory")
                p.mounts_by_volume[name] = path
                continue
            target.mkdir(parents=True, exist_ok=True)
            if "emptyDir" in vol:
                os.chmod(target, 0o777)
            elif "secret" in vol or "configMap" in vol:
                kind = "Secret" if "secret" in vol else "ConfigMap"
                src = dict(vol.get("secret") or vol.get("configMap"))
                src["name"] = src.get("secretName", src.get("name"))
                default = int(src.get("defaultMode", 0o644))
                for path, data, mode in await self._items(kind, src, meta["namespace"]):
                    _write(target / path, data, mode=mode or default, fs_group=fs_group)
            elif "projected" in vol:
                default = int(vol["projected"].get("defaultMode", 0o644))
                for s in vol["projected"].get("sources") or []:
                    if "serviceAccountToken" in s:
                        t = s["serviceAccountToken"]
                        _write(target / t["path"], await self._token(p, t), mode=default, fs_group=fs_group)
                    for kind in ("configMap", "secret"):
                        if kind in s:
                            items = await self._items("Secret" if kind == "secret" else "ConfigMap", s[kind],
                                                      meta["namespace"])
                            for path, data, mode in items:
                                _write(target / path, data, mode=mode or default, fs_group=fs_group)
                    if "downwardAPI" in s:
                        for item in s["downwardAPI"].get("items") or []:
                            value = field_value(p.pod, item["fieldRef"]["fieldPath"], host_ip=self.config.node_address)
                            _write(target / item["path"], value.encode(), mode=item.get("mode") or default,
                                   fs_group=fs_group)
            elif "downwardAPI" in vol:
                default = int(vol["downwardAPI"].get("defaultMode", 0o644))
                for item in vol["downwardAPI"].get("items") or []:
                    value = field_value(p.pod, item["fieldRef"]["fieldPath"], host_ip=self.config.node_address)
                    _write(target / item["path"], value.encode(), mode=item.get("mode") or default, fs_group=fs_group)
            else:
                raise PodSetupError(f"volume {name}: unsupported type")
            if fs_group is not None:
                os.chown(target, 0, fs_group)
                os.chmod(target, 0o2755)
            p.mounts_by_volume[name] = target

    async def _env(self, p: _Pod, c: dict[str, Any]) -> dict[str, str]:
        meta = p.pod["metadata"]
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOSTNAME": self.config.node_name,
               "HOME": "/tmp",
               "KUBERNETES_SERVICE_HOST": self.config.apiserver_host,
               "KUBERNETES_SERVICE_PORT": str(self.config.apiserver_port),
               "KUBERNETES_SERVICE_PORT_HTTPS": str(self.config.apiserver_port)}
        for e in c.get("env") or []:
            if "value" in e:
                env[e["name"]] = expand(e["value"] or "", env)
            elif "valueFrom" in e:
                vf = e["valueFrom"]
                if "fieldRef" in vf:
                    env[e["name"]] = field_value(p.pod, vf["fieldRef"]["fieldPath"], host_ip=self.config.node_address)
                else:
                    kind, ref = ("Secret", vf["secretKeyRef"]) if "secretKeyRef" in vf else ("ConfigMap", vf["configMapKeyRef"])
                    items = dict((k, v) for k, v, _m in await self._items(kind, {"name": ref["name"]}, meta["namespace"]))
                    if ref["key"] not in items and not ref.get("optional"):
                        raise PodSetupError(f"{kind} {ref['name']} has no key {ref['key']}")
                    env[e["name"]] = items.get(ref["key"], b"").decode()
        if self.config.clock_dir is not None:
            env.update({"LD_PRELOAD": LIBFAKETIME, "FAKETIME_TIMESTAMP_FILE": f"{CLOCK_MOUNT}/faketime",
                        "FAKETIME_CACHE_DURATION": "1", "FAKETIME_DONT_FAKE_MONOTONIC": "1",
                        "DONT_FAKE_MONOTONIC": "1"})
        return env

    async def _exec_spec(self, p: _Pod, c: _Container) -> dict[str, Any]:
        spec = c.spec
        pod_sc = p.pod["spec"].get("securityContext") or {}
        sc = {**pod_sc, **(spec.get("securityContext") or {})}
        env = await self._env(p, spec)
        command = [expand(a, env) for a in (spec.get("command") or IMAGE_ENTRYPOINT)]
        args = [expand(a, env) for a in (spec.get("args") or [])]
        if command[0] == "edgewatch":
            command = [sys.executable, "-m", "edgewatch", *command[1:]]
        mounts = [{"source": str(self.pods[p.uid].mounts_by_volume[m["name"]]), "target": m["mountPath"],
                   "read_only": bool(m.get("readOnly"))}
                  for m in spec.get("volumeMounts") or [] if m["name"] in p.mounts_by_volume]
        if self.config.clock_dir is not None:
            mounts.append({"source": str(self.config.clock_dir), "target": CLOCK_MOUNT, "read_only": True})
        uid = sc.get("runAsUser", IMAGE_UID)
        gid = sc.get("runAsGroup", IMAGE_GID if uid == IMAGE_UID else 0)
        groups = [g for g in [pod_sc.get("fsGroup"), *(pod_sc.get("supplementalGroups") or [])] if g is not None]
        if sc.get("runAsNonRoot") and uid == 0:
            raise PodSetupError(f"container {spec['name']}: runAsNonRoot and image will run as root")
        src = str(Path(edgewatch.__file__).resolve().parent.parent)
        overlay = self._pod_dir(p) / "overlay" / spec["name"]
        return {"argv": command + args, "env": env, "mounts": mounts, "uid": uid, "gid": gid, "groups": groups,
                "image_paths": [sys.prefix, sys.base_prefix, os.path.realpath(sys.executable), src],
                "overlay_dir": str(overlay), "workdir": spec.get("workingDir") or "/"}

    # -- status ---------------------------------------------------------------------------------------

    def _status(self, p: _Pod) -> dict[str, Any]:
        now = format_rfc3339()
        mains = [c for c in p.containers.values() if not c.init]
        running = p.initialized and all(c.proc is not None for c in mains)
        ready = running and all(c.ready for c in mains)

        def cstatus(c: _Container) -> dict[str, Any]:
            if c.proc is not None and c.started_at:
                state: dict[str, Any] = {"running": {"startedAt": c.started_at}}
            elif c.init and p.initialized:
                state = {"terminated": {"exitCode": 0, "reason": "Completed"}}
            else:
                state = {"waiting": {"reason": c.waiting or ("CreateContainerConfigError" if p.error else "PodInitializing"),
                                     **({"message": p.error} if p.error else {})}}
            out = {"name": c.spec["name"], "image": c.spec.get("image", ""), "imageID": "lab://" + c.spec.get("image", ""),
                   "ready": c.ready and c.proc is not None, "started": c.proc is not None, "restartCount": c.restarts,
                   "state": state, "containerID": f"lab://{p.uid}/{c.spec['name']}"}
            if c.last_exit is not None:
                out["lastState"] = {"terminated": {"exitCode": c.last_exit, "reason": "Error"}}
            return out

        cond = {"PodScheduled": True, "PodReadyToStartContainers": p.error is None, "Initialized": p.initialized,
                "ContainersReady": ready, "Ready": ready}
        return {"status": {
            "phase": "Running" if running else "Pending",
            "hostIP": self.config.node_address, "hostIPs": [{"ip": self.config.node_address}],
            "podIP": self.config.node_address, "podIPs": [{"ip": self.config.node_address}],
            "conditions": [{"type": k, "status": "True" if v else "False", "lastTransitionTime": now}
                           for k, v in cond.items()],
            "initContainerStatuses": [cstatus(c) for c in p.containers.values() if c.init],
            "containerStatuses": [cstatus(c) for c in mains],
        }}

    async def _post_status(self, p: _Pod) -> None:
        from lightkube import ApiError
        from lightkube.resources.core_v1 import Pod

        meta = p.pod["metadata"]
        body = self._status(p)
        if not body["status"]["initContainerStatuses"]:
            del body["status"]["initContainerStatuses"]
        try:
            await self.client.patch(Pod.Status, meta["name"], body, namespace=meta["namespace"])
        except ApiError as exc:
            if exc.status.code != 404:
                log.info("pod %s: status: %s", meta["name"], exc)
        except (OSError, httpx.HTTPError) as exc:
            log.info("pod %s: status: %s", meta["name"], exc)

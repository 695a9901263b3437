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

This module is the pods' lifecycle (sync, init containers, restarts, probes, termination, status);
what a container gets (volumes, environment, exec spec) is ``edgewatch_lab.testing.podsetup``, the
kubelet's pure rules (``$(VAR)``, downward API, file modes, back-off) ``edgewatch_lab.testing.podspec``.
Every public name of the three is importable from here.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import contextlib
import json
import logging
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2 as httpx
from lightkube import ApiError

from edgewatch_lab.testing.podsetup import (
    CLOCK_MOUNT,
    IMAGE_ENTRYPOINT,
    IMAGE_GID,
    IMAGE_UID,
    LIBFAKETIME,
    ContainerSetup,
    container_path,
)
from edgewatch_lab.testing.podspec import (
    BACKOFF_MAX_S,
    BACKOFF_START_S,
    PodSetupError,
    expand,
    field_value,
    file_mode,
    read_clock_offset,
    restart_delay,
    runs_here,
    write_clock_offset,
)
from edgewatch_lab.testing.procstat import record_container

__all__ = [
    "BACKOFF_MAX_S", "BACKOFF_START_S", "CLOCK_MOUNT", "IMAGE_ENTRYPOINT", "IMAGE_GID", "IMAGE_UID",
    "LIBFAKETIME", "SETUP_RETRY_S", "PodRunner", "PodRunnerConfig", "PodSetupError", "container_path", "expand",
    "field_value", "file_mode", "format_rfc3339", "read_clock_offset", "restart_delay", "runs_here",
    "write_clock_offset",
]

log = logging.getLogger(__name__)

SETUP_RETRY_S = 2.0


def _api_ready(pod: dict[str, Any]) -> str:
    """The pod's Ready condition status as the API has it ("True", "False", or "" if absent)."""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return str(cond.get("status", ""))
    return ""


def format_rfc3339() -> str:
    """Now, as RFC 3339 to the second (metav1.Time)."""
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class PodRunnerConfig:
    """Where and how the runner runs containers.

    Attributes:
        node_name: the Node whose pods these are.
        node_address: the node's InternalIP (hostIP, and podIP of hostNetwork pods).
        node_root: the node's own root folder; hostPath volumes and pod folders live under it.
        image_prefix: an image whose name starts with this (or with one of them) is run: edgewatch's,
            and in a SuperEdge run SuperEdge's (its binaries found on ``image_bin_dirs``).
        apiserver_host, apiserver_port: what ``KUBERNETES_SERVICE_HOST``/``PORT`` say.
        clock_dir: folder holding the node's ``faketime`` file, or None (true clock).
        probe_timeout_cap_s: longest probe timeout, seconds.
        image_bin_dirs: folders of the image's own programs besides edgewatch (the real image
            carries etcd in /usr/local/bin): put first on the containers' PATH and made visible to
            them like the rest of the "image".
    """

    node_name: str
    node_address: str
    node_root: Path
    image_prefix: str | tuple[str, ...]
    apiserver_host: str
    apiserver_port: int
    clock_dir: Path | None = None
    probe_timeout_cap_s: float = 5.0
    image_bin_dirs: tuple[str, ...] = ()


@dataclass
class ContainerState:
    """What the pod runner tracks of one container: its spec, process, restarts and the probe
    streaks behind its ``ready`` (what the kubelet reports as the container's status)."""

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
class PodState:
    """What the pod runner tracks of one pod: the last object seen, its containers by name, the
    host folders of its volumes and the task that runs it."""

    uid: str
    pod: dict[str, Any]
    containers: dict[str, ContainerState] = field(default_factory=dict)
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
        self.pods: dict[str, PodState] = {}
        self._setup = ContainerSetup(client=client, config=config, pods=self.pods)
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
            state = PodState(uid=uid, pod=pod)
            self.pods[uid] = state
            state.task = self._tg.create_task(self._run_pod(state))
            return
        state.pod = pod
        if state.containers and _api_ready(pod) != _api_ready(self._status(state)):
            # Someone else changed the pod's Ready condition: kube-controller-manager marks every pod
            # of a node whose Lease went stale NotReady (MarkPodsNotReady). A kubelet's status
            # manager puts its own view back (it reconciles every 10 s); so does this one.
            await self._post_status(state)

    async def forget(self, pod_obj: Any) -> None:
        """The pod is gone from the API (force-deleted): stop its containers, keep nothing."""
        state = self.pods.pop(pod_obj.metadata.uid, None)
        if state is not None:
            state.deleting = True
            await asyncio.gather(*(self._kill(c, grace_s=2.0) for c in state.containers.values()))
            if state.task is not None:
                state.task.cancel()

    # -- one pod ------------------------------------------------------------------------------------

    async def _run_pod(self, p: PodState) -> None:
        spec = p.pod["spec"]
        try:
            if not spec.get("hostNetwork"):
                raise PodSetupError("the lab has no pod network: only hostNetwork pods of the edgewatch image run")
            while True:  # like a kubelet's FailedMount: retry until the volumes can be set up
                try:
                    await self._setup.prepare_volumes(p)
                    p.error = None
                    break
                except (PodSetupError, ApiError, httpx.HTTPError, OSError) as exc:
                    p.error = f"volumes: {exc}"
                    log.info("pod %s: %s; retrying in %.0f s", p.pod["metadata"]["name"], p.error, SETUP_RETRY_S)
                    await self._post_status(p)
                    await asyncio.sleep(SETUP_RETRY_S)
            for c in spec.get("initContainers") or []:
                p.containers[c["name"]] = ContainerState(spec=c, init=True)
            for c in spec.get("containers") or []:
                p.containers[c["name"]] = ContainerState(spec=c)
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

    async def _supervise(self, p: PodState, c: ContainerState) -> None:
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

    async def _start_and_wait(self, p: PodState, c: ContainerState) -> int:
        spec_file = self._setup.pod_dir(p) / f"{c.spec['name']}.exec.json"
        spec_file.write_text(json.dumps(await self._setup.exec_spec(p, c)))
        log_dir = self.config.node_root / "var/log/pods" / f"{p.pod['metadata']['namespace']}_{p.pod['metadata']['name']}_{p.uid}" / c.spec["name"]
        log_dir.mkdir(parents=True, exist_ok=True)
        with open(log_dir / f"{c.restarts}.log", "ab") as out:
            c.proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "edgewatch_lab.testing.podexec", str(spec_file),
                stdout=out, stderr=asyncio.subprocess.STDOUT, stdin=asyncio.subprocess.DEVNULL)
        with contextlib.suppress(OSError):  # for the lab's per-pod accounting only
            record_container(self._setup.pod_dir(p), pod=f"{p.pod['metadata']['namespace']}/{p.pod['metadata']['name']}",
                             container=c.spec["name"], pid=c.proc.pid)
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

    async def _probe_loop(self, p: PodState, c: ContainerState) -> None:
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

    async def _every(self, p: PodState, c: ContainerState, probe: dict[str, Any], on_result: Any, *, phase: str) -> None:
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

    async def _kill(self, c: ContainerState, *, grace_s: float) -> None:
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

    async def _terminate(self, p: PodState) -> None:
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

    # -- status ---------------------------------------------------------------------------------------

    def _status(self, p: PodState) -> dict[str, Any]:
        now = format_rfc3339()
        mains = [c for c in p.containers.values() if not c.init]
        running = p.initialized and all(c.proc is not None for c in mains)
        ready = running and all(c.ready for c in mains)

        def cstatus(c: ContainerState) -> dict[str, Any]:
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

    async def _post_status(self, p: PodState) -> None:
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

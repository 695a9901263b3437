"""What a kubelet gives the containers of one node's pods, for the lab's pod runner
(``edgewatch_lab.testing.podrunner``): the pod's volumes materialized under the node's root folder,
the container's environment, and the exec spec that ``edgewatch_lab.testing.podexec`` runs.

Volumes: ``secret`` and ``configMap`` (from the API, with ``defaultMode``/item modes), ``projected``
(a ServiceAccount token from the TokenRequest API *bound to the pod*, ConfigMap and Secret items,
the downward API), ``downwardAPI``, ``hostPath`` (under the node's own root folder,
``DirectoryOrCreate`` made by root 0755) and ``emptyDir``, with ``fsGroup`` ownership (group set,
group read added: kubelet's SetVolumeOwnership). Environment: literal values with ``$(VAR)``
expansion, ``fieldRef``, Secret and ConfigMap keys, ``KUBERNETES_SERVICE_*``, and libfaketime's
variables when the node's clock is skewed.

Limits: no subPath, no token refresh, no ``resourceFieldRef``; the "image" is the host's Python and
edgewatch (``IMAGE_*`` are the Dockerfile's user and entrypoint), plus the folders of
``PodRunnerConfig.image_bin_dirs`` (etcd, which the real image carries), first on ``PATH``. An
image tagged ``git-<revision>`` runs that revision's edgewatch (``PYTHONPATH``; another release,
``edgewatch_lab.testing.revisions``) with this machine's Python and packages.
"""

from __future__ import annotations

import asyncio
import base64
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import edgewatch
from edgewatch_lab.testing.podspec import PodSetupError, expand, field_value, file_mode
from edgewatch_lab.testing.revisions import RevisionError, image_revision, revision_tree

if TYPE_CHECKING:
    from edgewatch_lab.testing.podrunner import ContainerState, PodRunnerConfig, PodState

IMAGE_UID = 65532           # the Dockerfile's USER 65532:65532
IMAGE_GID = 65532
IMAGE_ENTRYPOINT = ("edgewatch",)
LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
CLOCK_MOUNT = "/run/edgewatch-lab-clock"
IMAGE_PATH = ("/usr/local/bin", "/usr/bin", "/bin")


def container_path(image_bin_dirs: tuple[str, ...] | list[str] = ()) -> str:
    """A container's ``PATH``: the image's extra program folders (``PodRunnerConfig.image_bin_dirs``,
    e.g. etcd's, which the real image has in /usr/local/bin) first, then the image's usual ones."""
    dirs = [d for d in image_bin_dirs if d] + [d for d in IMAGE_PATH if d not in image_bin_dirs]
    return ":".join(dict.fromkeys(dirs))


def _write(path: Path, data: bytes, *, mode: int, fs_group: int | None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.chown(path, 0, fs_group if fs_group is not None else 0)
    os.chmod(path, file_mode(mode, fs_group=fs_group))


class ContainerSetup:
    """Prepares the volumes, environment and exec spec of one node's containers.

    Args:
        client: the kubelet's API client (reads Secrets/ConfigMaps, TokenRequest).
        config: the runner's ``PodRunnerConfig``.
        pods: the runner's pods by uid (the same dict, kept up to date by the runner).
    """

    def __init__(self, *, client: Any, config: PodRunnerConfig, pods: dict[str, PodState]) -> None:
        self.client = client
        self.config = config
        self.pods = pods

    def pod_dir(self, p: PodState) -> Path:
        """The pod's own folder under the node's root (made if missing)."""
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

    async def _token(self, p: PodState, source: dict[str, Any]) -> bytes:
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

    async def prepare_volumes(self, p: PodState) -> None:
        """Materialize every volume of the pod; record where each is in ``p.mounts_by_volume``."""
        spec, meta = p.pod["spec"], p.pod["metadata"]
        fs_group = (spec.get("securityContext") or {}).get("fsGroup")
        base = self.pod_dir(p) / "volumes"
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

    async def _env(self, p: PodState, c: dict[str, Any]) -> dict[str, str]:
        meta = p.pod["metadata"]
        env = {"PATH": container_path(self.config.image_bin_dirs), "HOSTNAME": self.config.node_name,
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

    async def exec_spec(self, p: PodState, c: ContainerState) -> dict[str, Any]:
        """The launcher's spec for container ``c`` (argv, env, mounts, user and groups, image paths)."""
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
        revision = image_revision(spec.get("image", ""))
        if revision is not None:  # another release's code (edgewatch_lab.testing.revisions)
            try:
                src = str(await asyncio.to_thread(lambda: revision_tree(revision) / "src"))
            except RevisionError as exc:
                raise PodSetupError(f"container {spec['name']}: image {spec.get('image')}: {exc}") from exc
            env["PYTHONPATH"] = src
        overlay = self.pod_dir(p) / "overlay" / spec["name"]
        return {"argv": command + args, "env": env, "mounts": mounts, "uid": uid, "gid": gid, "groups": groups,
                "image_paths": [sys.prefix, sys.base_prefix, os.path.realpath(sys.executable), src,
                                *self.config.image_bin_dirs],
                "overlay_dir": str(overlay), "workdir": spec.get("workingDir") or "/"}

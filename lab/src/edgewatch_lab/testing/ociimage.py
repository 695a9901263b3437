"""Write a container image as an OCI image-layout tar archive, with the Python standard library only.

What it is for
    The lab's real nodes (``edgewatch_lab.testing.realnode``) run containers from images built on this
    machine, which reaches no registry. ``ctr images import`` reads the archives written here: the
    OCI image layout (``oci-layout``, ``index.json``, ``blobs/sha256/<digest>``), one manifest, one
    config and uncompressed layers. containerd takes the image's name from the index entry's
    ``io.containerd.image.name`` annotation and decides whether to unpack from the config's ``os``
    and ``architecture`` (containerd v2.3: ``core/images/archive/importer.go``,
    ``core/unpack/unpacker.go``).

Limits: one platform (linux/amd64) per archive; layers are uncompressed (``application/vnd.oci.
image.layer.v1.tar``: for an uncompressed layer the diff ID is the digest); a layer is one folder's
tree, owned by root unless ``owners`` says otherwise (hard links and device files are not written).

Source: the OCI image specification v1.1 (image-layout.md, manifest.md, config.md).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

__all__ = ["Blob", "image_config", "write_layer", "write_oci_archive"]

MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
INDEX_TYPE = "application/vnd.oci.image.index.v1+json"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar"
#: A fixed mtime for every layer entry (2000-01-01): the same tree gives the same digest.
_EPOCH = 946684800
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Blob:
    """A content-addressed file: ``digest`` is ``sha256:<hex>`` of its bytes, ``size`` in bytes."""

    path: Path
    digest: str
    size: int


def _hash_file(path: Path) -> Blob:
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
            size += len(chunk)
    return Blob(path=path, digest=f"sha256:{h.hexdigest()}", size=size)


def write_layer(root: Path, out: Path, *, owners: Mapping[str, tuple[int, int]] | None = None) -> Blob:
    """Write the tree under ``root`` as an uncompressed layer tar (names relative to ``root``,
    sorted, mtime fixed, owner root:root unless ``owners`` maps a relative path to ``(uid, gid)``).

    Returns the layer's blob (its digest is also its diff ID). Raises OSError on I/O errors.
    """
    owners = owners or {}

    def entries() -> list[str]:
        found: list[str] = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            rel = os.path.relpath(dirpath, root)
            if rel != ".":
                found.append(rel)
            found.extend(os.path.normpath(os.path.join(rel, name)) for name in sorted(filenames))
            # symlinks to folders are listed by os.walk as dirnames but not descended into
            found.extend(os.path.normpath(os.path.join(rel, d)) for d in dirnames
                         if os.path.islink(os.path.join(dirpath, d)))
        return found

    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        for rel in entries():
            path = root / rel
            st = os.lstat(path)
            if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode) or stat.S_ISLNK(st.st_mode)):
                continue
            info = tar.gettarinfo(str(path), arcname=rel)
            info.uid, info.gid = owners.get(rel, (0, 0))
            info.uname = info.gname = ""
            info.mtime = _EPOCH
            if info.isreg():
                with open(path, "rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    return _hash_file(out)


def image_config(*, diff_ids: list[str], entrypoint: list[str], user: str = "",
                 env: Mapping[str, str] | None = None, labels: Mapping[str, str] | None = None,
                 workdir: str = "") -> dict[str, Any]:
    """The image config (OCI config.md) for linux/amd64: entrypoint, user (``uid:gid``), env, labels."""
    config: dict[str, Any] = {"Entrypoint": list(entrypoint)}
    if user:
        config["User"] = user
    if env:
        config["Env"] = [f"{k}={v}" for k, v in env.items()]
    if labels:
        config["Labels"] = dict(labels)
    if workdir:
        config["WorkingDir"] = workdir
    return {"architecture": "amd64", "os": "linux", "config": config,
            "rootfs": {"type": "layers", "diff_ids": list(diff_ids)}}


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), _EPOCH, 0o644
    tar.addfile(info, io.BytesIO(data))


def _add_file(tar: tarfile.TarFile, name: str, path: Path) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = path.stat().st_size, _EPOCH, 0o644
    with open(path, "rb") as f:
        tar.addfile(info, f)


def write_oci_archive(out: Path | BinaryIO, *, name: str, layers: list[Blob], config: Mapping[str, Any]) -> str:
    """Write an OCI image-layout tar holding one image called ``name`` (a full reference such as
    ``ghcr.io/edgewatch/edgewatch:0.1.0``) made of ``layers`` (bottom first) and ``config``.

    Returns the manifest digest (``sha256:<hex>``). Raises ValueError when the config's diff IDs
    are not the layers' digests, OSError on I/O errors.
    """
    if list(config.get("rootfs", {}).get("diff_ids", [])) != [b.digest for b in layers]:
        raise ValueError("config rootfs.diff_ids must list the layers' digests, bottom first")
    config_bytes = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    config_digest = "sha256:" + hashlib.sha256(config_bytes).hexdigest()
    manifest = {
        "schemaVersion": 2, "mediaType": MANIFEST_TYPE,
        "config": {"mediaType": CONFIG_TYPE, "digest": config_digest, "size": len(config_bytes)},
        "layers": [{"mediaType": LAYER_TYPE, "digest": b.digest, "size": b.size} for b in layers],
    }
    manifest_bytes = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
    manifest_digest = "sha256:" + hashlib.sha256(manifest_bytes).hexdigest()
    tag = name.rsplit(":", 1)[1] if ":" in name.rsplit("/", 1)[-1] else "latest"
    index = {
        "schemaVersion": 2, "mediaType": INDEX_TYPE,
        "manifests": [{"mediaType": MANIFEST_TYPE, "digest": manifest_digest, "size": len(manifest_bytes),
                       "platform": {"architecture": "amd64", "os": "linux"},
                       "annotations": {"io.containerd.image.name": name,
                                       "org.opencontainers.image.ref.name": tag}}],
    }
    mode = "w" if isinstance(out, Path) else "w|"
    kwargs: dict[str, Any] = {"name": out} if isinstance(out, Path) else {"fileobj": out}
    with tarfile.open(mode=mode, format=tarfile.PAX_FORMAT, **kwargs) as tar:
        _add_bytes(tar, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        _add_bytes(tar, "index.json", json.dumps(index, sort_keys=True).encode())
        _add_bytes(tar, f"blobs/sha256/{manifest_digest[7:]}", manifest_bytes)
        _add_bytes(tar, f"blobs/sha256/{config_digest[7:]}", config_bytes)
        for blob in layers:
            _add_file(tar, f"blobs/sha256/{blob.digest[7:]}", blob.path)
    return manifest_digest

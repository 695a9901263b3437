"""Write a container image as an OCI image-layout tar archive, with the Python standard library only.

What it is for
    The lab's real nodes (``edgewatch_lab.testing.realnode``) run containers from images built on this
    machine, which reaches no registry. ``ctr images import`` reads the archives written here: the
    OCI image layout (``oci-layout``, ``index.json``, ``blobs/sha256/<digest>``), one manifest, one
    config and uncompressed layers per platform. containerd takes the image's name from the index entry's
    ``io.containerd.image.name`` annotation and decides whether to unpack from the config's ``os``
    and ``architecture`` (containerd v2.3: ``core/images/archive/importer.go``,
    ``core/unpack/unpacker.go``).

Layout
    One platform (``write_oci_archive``): ``index.json`` lists the image manifest, with its
    ``platform`` and the name annotations. Several platforms (``write_oci_index``, the
    linux/amd64 + linux/arm64 image, docs/install.md): ``index.json`` lists one image index blob carrying the name
    annotations (as ``docker buildx build --output type=oci`` writes it, so containerd records one
    image name for all platforms), and that index lists one manifest per platform, each with
    ``platform`` (``os``, ``architecture``) set from its config.

Limits: layers are uncompressed (``application/vnd.oci.
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

__all__ = ["Blob", "PlatformImage", "image_config", "write_layer", "write_oci_archive", "write_oci_index"]

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
                 workdir: str = "", architecture: str = "amd64") -> dict[str, Any]:
    """The image config (OCI config.md) for linux/``architecture`` (Go's names: ``amd64``,
    ``arm64``): entrypoint, user (``uid:gid``), env, labels."""
    config: dict[str, Any] = {"Entrypoint": list(entrypoint)}
    if user:
        config["User"] = user
    if env:
        config["Env"] = [f"{k}={v}" for k, v in env.items()]
    if labels:
        config["Labels"] = dict(labels)
    if workdir:
        config["WorkingDir"] = workdir
    return {"architecture": architecture, "os": "linux", "config": config,
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


@dataclass(frozen=True)
class PlatformImage:
    """One platform's image: its layers (bottom first) and its config (``image_config``)."""

    layers: list[Blob]
    config: Mapping[str, Any]


def _json_bytes(value: Any) -> tuple[bytes, str]:
    data = json.dumps(value, sort_keys=True, separators=(",", ":")).encode()
    return data, "sha256:" + hashlib.sha256(data).hexdigest()


def _manifest(image: PlatformImage) -> tuple[dict[str, bytes], dict[str, Any]]:
    """The config and manifest blobs of one image, and the manifest's descriptor with its platform."""
    if list(image.config.get("rootfs", {}).get("diff_ids", [])) != [b.digest for b in image.layers]:
        raise ValueError("config rootfs.diff_ids must list the layers' digests, bottom first")
    config_bytes, config_digest = _json_bytes(image.config)
    manifest = {
        "schemaVersion": 2, "mediaType": MANIFEST_TYPE,
        "config": {"mediaType": CONFIG_TYPE, "digest": config_digest, "size": len(config_bytes)},
        "layers": [{"mediaType": LAYER_TYPE, "digest": b.digest, "size": b.size} for b in image.layers],
    }
    manifest_bytes, manifest_digest = _json_bytes(manifest)
    platform = {"architecture": image.config.get("architecture", "amd64"), "os": image.config.get("os", "linux")}
    descriptor = {"mediaType": MANIFEST_TYPE, "digest": manifest_digest, "size": len(manifest_bytes),
                  "platform": platform}
    return {manifest_digest: manifest_bytes, config_digest: config_bytes}, descriptor


def _name_annotations(name: str) -> dict[str, str]:
    tag = name.rsplit(":", 1)[1] if ":" in name.rsplit("/", 1)[-1] else "latest"
    return {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": tag}


def _write_layout(out: Path | BinaryIO, index: dict[str, Any], blobs: dict[str, bytes], layers: list[Blob]) -> None:
    mode = "w" if isinstance(out, Path) else "w|"
    kwargs: dict[str, Any] = {"name": out} if isinstance(out, Path) else {"fileobj": out}
    with tarfile.open(mode=mode, format=tarfile.PAX_FORMAT, **kwargs) as tar:
        _add_bytes(tar, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        _add_bytes(tar, "index.json", json.dumps(index, sort_keys=True).encode())
        for digest, data in blobs.items():
            _add_bytes(tar, f"blobs/sha256/{digest[7:]}", data)
        written: set[str] = set()
        for blob in layers:
            if blob.digest not in written:
                written.add(blob.digest)
                _add_file(tar, f"blobs/sha256/{blob.digest[7:]}", blob.path)


def write_oci_archive(out: Path | BinaryIO, *, name: str, layers: list[Blob], config: Mapping[str, Any]) -> str:
    """Write an OCI image-layout tar holding one image called ``name`` (a full reference such as
    ``ghcr.io/edgewatch/edgewatch:0.1.0``) made of ``layers`` (bottom first) and ``config``.

    Returns the manifest digest (``sha256:<hex>``). Raises ValueError when the config's diff IDs
    are not the layers' digests, OSError on I/O errors.
    """
    blobs, descriptor = _manifest(PlatformImage(layers=list(layers), config=config))
    descriptor["annotations"] = _name_annotations(name)
    index = {"schemaVersion": 2, "mediaType": INDEX_TYPE, "manifests": [descriptor]}
    _write_layout(out, index, blobs, list(layers))
    return str(descriptor["digest"])


def write_oci_index(out: Path | BinaryIO, *, name: str, images: list[PlatformImage]) -> str:
    """Write an OCI image-layout tar holding one multi-platform image called ``name``: an image
    index listing one manifest per entry of ``images`` (its platform from its config), named by
    the one ``index.json`` entry that points at it (see the module docstring).

    Returns the image index's digest. Raises ValueError when a config's diff IDs are not its
    layers' digests or two images have the same platform, OSError on I/O errors.
    """
    blobs: dict[str, bytes] = {}
    descriptors = []
    for image in images:
        image_blobs, descriptor = _manifest(image)
        blobs.update(image_blobs)
        descriptors.append(descriptor)
    platforms = [(d["platform"]["os"], d["platform"]["architecture"]) for d in descriptors]
    if not platforms or len(set(platforms)) != len(platforms):
        raise ValueError(f"one image per platform, at least one: got {platforms}")
    image_index_bytes, image_index_digest = _json_bytes(
        {"schemaVersion": 2, "mediaType": INDEX_TYPE, "manifests": descriptors})
    blobs[image_index_digest] = image_index_bytes
    index = {"schemaVersion": 2, "mediaType": INDEX_TYPE,
             "manifests": [{"mediaType": INDEX_TYPE, "digest": image_index_digest, "size": len(image_index_bytes),
                            "annotations": _name_annotations(name)}]}
    _write_layout(out, index, blobs, [b for image in images for b in image.layers])
    return image_index_digest

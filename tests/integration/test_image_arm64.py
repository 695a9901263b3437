"""The linux/arm64 edgewatch image, run (docs/install.md): built with linux/amd64 into one multi-platform
OCI archive (``edgewatch_lab.testing.images.ensure_edgewatch_image``, what ``make image`` builds;
cached, so free when warm), its arm64 root filesystem unpacked into a temporary folder and its
own Python run under qemu-user: ``qemu-aarch64-static -L <rootfs> <rootfs>/usr/bin/python3.11 ...``
(user-mode emulation with the rootfs as the guest's library prefix; no chroot, no binfmt).

Checked: the index lists one manifest per platform; the arm64 interpreter (and every other ELF
file in the arm64 image) is an AArch64 ELF and the amd64 one an x86-64 ELF (an x86 binary in the arm64 image, the anchors' bug, fails here); under
qemu every module of the package ``edgewatch`` in the image imports, ``edgewatch agent --help``
works, one Ed25519 signature is made and verified with edgewatch's keyring
(``edgewatch.core.identity``), one wire envelope is encoded and decoded (``edgewatch.core.wire``).
etcd (the pool coordinator pod's store): ``/usr/local/bin/etcd`` is in both platforms' images
(root's, mode 0755), a static ELF of each platform's machine, and the arm64 one run under qemu
(``etcd --version``) reports the version the Dockerfile ships and ``hack/binaries/etcd/go.mod``
requires.

qemu-user-static comes from Debian's package (``make system-deps``); without it these tests fail,
never skip.
"""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest
from edgewatch_lab.testing.images import PYTHON, ensure_edgewatch_image

REPO = Path(__file__).resolve().parents[2]
QEMU = "qemu-aarch64-static"
#: The interpreter the image's console script names (``#!/usr/bin/python3.11``).
INTERPRETER = f"usr/bin/{PYTHON}"
#: ``e_machine`` values (glibc's elf.h): what the ELF header says the binary runs on.
ELF_MACHINES = {62: "x86_64", 183: "aarch64"}
ETCD = "usr/local/bin/etcd"
#: The etcd version the wrapper module requires (without the ``v``): what the image must carry.
ETCD_VERSION = re.search(r"^require go\.etcd\.io/etcd/server/v3 v(\S+)$",
                         (REPO / "hack/binaries/etcd/go.mod").read_text(), re.M).group(1)  # type: ignore[union-attr]

SMOKE = r'''
import importlib, json, pkgutil, platform, sys, traceback

import edgewatch

failed, modules = {}, []
def onerror(name):
    failed[name] = traceback.format_exc(limit=2)
for info in pkgutil.walk_packages(edgewatch.__path__, "edgewatch.", onerror=onerror):
    modules.append(info.name)
    if info.name == "edgewatch.__main__":
        continue  # runs the command line when imported: `edgewatch agent --help` below runs it
    try:
        importlib.import_module(info.name)
    except BaseException:
        failed[info.name] = traceback.format_exc(limit=2)

from edgewatch.core.identity import NodeKey, NodeKeyring, PublicKeys
from edgewatch.core.signing import Verification
from edgewatch.core.types import NodeName
from edgewatch.core.wire import ReplayGuard, decode_envelope, encode_envelope, sign_heartbeat

public = PublicKeys()
a = NodeKeyring(node=NodeName("node-a"), keys=(NodeKey.generate(),), public=public)
b = NodeKeyring(node=NodeName("node-b"), keys=(NodeKey.generate(),), public=public)
signed = a.sign({"node": "node-a", "ok": True}, domain="edgewatch-smoke")
tampered = dict(signed, ok=False)

own = sign_heartbeat(origin=NodeName("node-a"), incarnation=1, seq=1, kubelet_ok=True, cloud_ok=False,
                     alive=[NodeName("node-a"), NodeName("node-b")], dead=[], keyring=a)
raw = encode_envelope(sender=NodeName("node-a"), receiver=NodeName("node-b"), epoch=1, seq=1,
                      nonce="0123456789abcdef0123456789abcdef", own=own, keyring=a)
decoded = decode_envelope(raw, keyring=b, receiver=NodeName("node-b"), max_bytes=65536, guard=ReplayGuard())

print(json.dumps({
    "machine": platform.machine(),
    "prefix": sys.prefix,
    "edgewatch_file": edgewatch.__file__,
    "modules": modules,
    "failed": failed,
    "signature": [str(b.verify(signed, domain="edgewatch-smoke")), len(signed["mac"])],
    "tampered": str(b.verify(tampered, domain="edgewatch-smoke")),
    "envelope": [decoded.sender, decoded.receiver, decoded.seq, decoded.own == own, len(raw)],
}))
'''


def _qemu() -> str:
    found = shutil.which(QEMU)
    if found is None:
        pytest.fail(f"{QEMU} not found: run `make system-deps` (installs Debian's qemu-user-static)")
    return found


def _blob(tar: tarfile.TarFile, digest: str) -> Any:
    f = tar.extractfile(f"blobs/sha256/{digest.removeprefix('sha256:')}")
    assert f is not None, digest
    return f


def _platform_manifests(archive: Path) -> dict[str, dict[str, Any]]:
    """``os/architecture`` -> manifest, from index.json's image index."""
    with tarfile.open(archive) as tar:
        (entry,) = json.load(tar.extractfile("index.json"))["manifests"]  # type: ignore[arg-type]
        assert entry["mediaType"] == "application/vnd.oci.image.index.v1+json"
        assert entry["annotations"]["io.containerd.image.name"].startswith("ghcr.io/edgewatch/edgewatch:")
        found = {}
        for descriptor in json.load(_blob(tar, entry["digest"]))["manifests"]:
            platform = f"{descriptor['platform']['os']}/{descriptor['platform']['architecture']}"
            manifest = json.load(_blob(tar, descriptor["digest"]))
            config = json.load(_blob(tar, manifest["config"]["digest"]))
            assert f"{config['os']}/{config['architecture']}" == platform
            found[platform] = manifest
    return found


def _unpack(archive: Path, manifest: dict[str, Any], dest: Path) -> Path:
    with tarfile.open(archive) as tar:
        for layer in manifest["layers"]:
            with tarfile.open(fileobj=_blob(tar, layer["digest"]), mode="r|") as files:
                files.extractall(dest, filter="tar")
    return dest


def _layer_entry(archive: Path, manifest: dict[str, Any], path: str) -> tarfile.TarInfo:
    """The tar header of ``path`` in the manifest's layers (the last layer holding it wins)."""
    found = None
    with tarfile.open(archive) as tar:
        for layer in manifest["layers"]:
            with tarfile.open(fileobj=_blob(tar, layer["digest"]), mode="r|") as files:
                for info in files:
                    if info.name.lstrip("./") == path:
                        found = info
    assert found is not None, f"{path} is not in the image"
    return found


def _is_static(rootfs: Path, path: str) -> bool:
    """No ``PT_INTERP`` program header (little-endian ELF64): no dynamic loader needed."""
    data = (rootfs / path).read_bytes()
    assert data[4] == 2, f"{path} is not a 64-bit ELF file"
    (phoff,) = struct.unpack_from("<Q", data, 32)
    phentsize, phnum = struct.unpack_from("<HH", data, 54)
    return all(struct.unpack_from("<I", data, phoff + i * phentsize)[0] != 3 for i in range(phnum))


def _elf_machine(rootfs: Path, path: str) -> str:
    """The ``e_machine`` of a little-endian ELF file (the header's bytes 18-19; the ELF gABI)."""
    header = (rootfs / path).read_bytes()[:20]
    assert header[:4] == b"\x7fELF" and header[5] == 1, f"{path} is not a little-endian ELF file"
    (machine,) = struct.unpack_from("<H", header, 18)
    return ELF_MACHINES.get(machine, f"e_machine {machine}")


@pytest.fixture(scope="module")
def archive() -> Path:
    return ensure_edgewatch_image(repo=REPO, progress=lambda line: None)


@pytest.fixture(scope="module")
def rootfs(archive: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _unpack(archive, _platform_manifests(archive)["linux/arm64"], tmp_path_factory.mktemp("arm64-rootfs"))


def _run_arm64(rootfs: Path, *args: str, timeout_s: float = 300.0) -> subprocess.CompletedProcess[str]:
    argv = [_qemu(), "-L", str(rootfs), str(rootfs / INTERPRETER), "-I", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, cwd=rootfs,
                          env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"})


def test_the_archive_is_one_index_of_both_platforms(archive: Path, tmp_path: Path) -> None:
    manifests = _platform_manifests(archive)
    assert sorted(manifests) == ["linux/amd64", "linux/arm64"]
    assert manifests["linux/amd64"]["layers"] != manifests["linux/arm64"]["layers"]
    amd64 = _unpack(archive, manifests["linux/amd64"], tmp_path / "amd64")
    assert _elf_machine(amd64, INTERPRETER) == "x86_64"
    # both carry etcd, as the Dockerfile's image does (COPY --from=etcd: root's, 0755)
    assert _elf_machine(amd64, ETCD) == "x86_64" and _is_static(amd64, ETCD)
    for platform, manifest in manifests.items():
        info = _layer_entry(archive, manifest, ETCD)
        assert info.isreg() and (info.uid, info.gid, info.mode & 0o7777) == (0, 0, 0o755), (platform, info)


def test_the_amd64_etcd_runs(tmp_path: Path, archive: Path) -> None:
    amd64 = _unpack(archive, _platform_manifests(archive)["linux/amd64"], tmp_path / "amd64")
    proc = subprocess.run([str(amd64 / ETCD), "--version"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert f"etcd Version: {ETCD_VERSION}\n" in proc.stdout and "Go OS/Arch: linux/amd64" in proc.stdout, proc.stdout


def test_the_arm64_interpreter_is_an_aarch64_binary(rootfs: Path) -> None:
    assert _elf_machine(rootfs, INTERPRETER) == "aarch64"
    # and so is every other ELF file (Debian's libraries, the wheels' extension modules)
    machines: dict[str, list[str]] = {}
    for path in rootfs.rglob("*"):
        if path.is_file() and not path.is_symlink() and path.open("rb").read(4) == b"\x7fELF":
            machines.setdefault(_elf_machine(rootfs, str(path.relative_to(rootfs))), []).append(str(path))
    assert sorted(machines) == ["aarch64"], {m: paths[:5] for m, paths in machines.items() if m != "aarch64"}
    assert len(machines["aarch64"]) > 100
    assert (rootfs / "usr/lib/ld-linux-aarch64.so.1").exists()
    assert (rootfs / "usr/local/bin/edgewatch").read_text().startswith(f"#!/{INTERPRETER}\n")


def test_under_qemu_every_module_imports_and_signing_and_the_wire_work(rootfs: Path) -> None:
    proc = _run_arm64(rootfs, "-c", SMOKE)
    assert proc.returncode == 0, proc.stderr[-4000:]
    got = json.loads(proc.stdout)
    assert got["machine"] == "aarch64"
    assert got["edgewatch_file"].startswith(str(rootfs / "usr/lib/python3/dist-packages/edgewatch/"))
    # every module of this checkout's package was found in the image (and imported)
    expected = {".".join(("edgewatch", *p.relative_to(REPO / "src/edgewatch").with_suffix("").parts)).removesuffix(".__init__")
                for p in (REPO / "src/edgewatch").rglob("*.py")}
    found = {"edgewatch", *got["modules"]}
    assert found == expected, f"missing in the image: {sorted(expected - found)}, extra: {sorted(found - expected)}"
    assert got["failed"] == {}
    assert got["signature"] == ["ok", 128]
    assert got["tampered"] == "bad_signature"
    sender, receiver, seq, own_equal, size = got["envelope"]
    assert (sender, receiver, seq, own_equal) == ("node-a", "node-b", 1, True) and size > 0


def test_the_arm64_etcd_is_a_static_aarch64_binary_of_the_dockerfiles_version(rootfs: Path) -> None:
    assert (rootfs / ETCD).is_file() and (rootfs / ETCD).stat().st_mode & 0o777 == 0o755
    assert _elf_machine(rootfs, ETCD) == "aarch64"
    assert _is_static(rootfs, ETCD)
    # the version the Dockerfile's image ships (FROM quay.io/coreos/etcd:v<version>)
    assert f"quay.io/coreos/etcd:v{ETCD_VERSION} " in (REPO / "Dockerfile").read_text()
    proc = subprocess.run([_qemu(), "-L", str(rootfs), str(rootfs / ETCD), "--version"], capture_output=True,
                          text=True, timeout=120, cwd=rootfs, env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert f"etcd Version: {ETCD_VERSION}\n" in proc.stdout, proc.stdout
    assert "Go OS/Arch: linux/arm64" in proc.stdout, proc.stdout


def test_under_qemu_edgewatch_agent_help(rootfs: Path) -> None:
    proc = _run_arm64(rootfs, str(rootfs / "usr/local/bin/edgewatch"), "agent", "--help")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "Usage:" in proc.stdout and "agent" in proc.stdout

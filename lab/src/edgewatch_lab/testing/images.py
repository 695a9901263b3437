"""Build the images the lab's real nodes run, here and offline: edgewatch's own, and pause.

What it is for
    ``make image`` and the playground's real nodes (``edgewatch_lab.testing.realnode``) need
    ``ghcr.io/edgewatch/edgewatch:<version>`` (the tag the shipped manifests name) and the pod
    sandbox image ``registry.k8s.io/pause:3.10.2`` (containerd's default sandbox image) without a
    registry. Both are written as OCI archives by ``edgewatch_lab.testing.ociimage`` and imported with
    ``ctr images import``.

How the edgewatch image is made (the Dockerfile stays the user-facing recipe)
    * the Python runtime comes from Debian's packages as installed on this machine: the files
      ``dpkg -L`` lists for ``python3.11-minimal``, ``libpython3.11-stdlib``, ``coreutils`` (the
      agent's init container runs ``chown``), ``dash`` and their installed dependencies (docs,
      manuals and locales left out), laid out merged-/usr as Debian 12 is;
    * edgewatch and its pinned dependencies are installed by pip from this checkout's
      ``pyproject.toml``, exactly what the Dockerfile's ``pip install .`` installs (same package
      version, same pins), into ``/usr/lib/python3/dist-packages``;
    * every module is byte-compiled at build time (the agent runs with a read-only root
      filesystem, so Python could not cache them at run time);
    * ``/usr/local/bin/edgewatch`` is the console script; ``USER 65532:65532`` and
      ``ENTRYPOINT ["edgewatch"]`` as in the Dockerfile;
    * ``/usr/local/bin/etcd`` (mode 0755, root's) is etcd at the version the Dockerfile copies from
      ``quay.io/coreos/etcd`` (v3.6.16: what ``hack/binaries/etcd/go.mod`` requires), which the pool
      coordinator pod runs: a static Go binary built from the Go module proxy for the image's
      architecture by ``hack/binaries/build-etcd.sh <arch>`` (cached in
      ``~/.cache/edgewatch/bin/etcd-<version>-<arch>-<stamp>/``; a few minutes the first time). For
      the host's architecture too (not build.sh's etcd): same wrapper and flags, so the same bytes,
      and a warm Go build cache makes it a link step of seconds.

    The Dockerfile's base is ``python:3.11-slim`` (CPython 3.11 on Debian 12); this one is Debian
    12's own CPython 3.11. Both run the same edgewatch wheel.

Other architectures (linux/arm64 beside linux/amd64, docs/install.md)
    The same recipe, mirrored: the same Debian packages at the same versions as installed here,
    for that architecture, fetched with ``apt-get download <pkg>:<arch>=<version>`` (``Architecture:
    all`` packages without the qualifier) and unpacked with ``dpkg-deb -x`` (the ``.deb`` files
    cached in ``<cache>/debs/<arch>/``); edgewatch and its pins installed by pip from PyPI's wheels
    for that platform (``pip install --target --platform manylinux_2_X_<machine> --only-binary=:all:
    --python-version 3.11 --implementation cp``: every pin must have such a wheel or be pure
    Python); byte-compiled by this host's Python (the same CPython version, so the same ``.pyc``);
    etcd cross-compiled for that architecture (``GOARCH``) by ``hack/binaries/build-etcd.sh``.
    ``apt`` must know the architecture (``make system-deps`` runs ``dpkg --add-architecture arm64``
    and ``apt-get update``). ``build_edgewatch_image(platforms=...)`` with several platforms writes one
    multi-platform archive (an OCI image index: ``edgewatch_lab.testing.ociimage.write_oci_index``).

Cache: ``~/.cache/edgewatch/images/`` (``EDGEWATCH_CACHE`` overrides the root), keyed by a hash of
the sources, ``pyproject.toml``, this module, etcd's recipe (``hack/binaries/build-etcd.sh`` and the
wrapper module ``hack/binaries/etcd/``) and the Debian package versions (and the platforms);
a hit costs nothing. The lab's nodes run the host's platform only (``ensure_images``);
``ensure_edgewatch_image`` gives the multi-platform archive (``make image``, ``make sbom``).

Limits: needs a Debian/Ubuntu host with those packages installed (``dpkg-query``), apt's package
lists for every other architecture built, and pip's access to PyPI (or its cache) for the pinned
dependencies, Go (``go`` on PATH) and the Go module proxy (or Go's module cache) for etcd;
linux/amd64 and linux/arm64 only.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from edgewatch import __version__
from edgewatch_lab.testing.ociimage import PlatformImage, image_config, write_layer, write_oci_archive, write_oci_index

__all__ = ["EDGEWATCH_IMAGE", "MULTI_PLATFORMS", "PAUSE_IMAGE", "ImageError", "Images", "debian_closure",
           "ensure_edgewatch_image", "ensure_images"]

EDGEWATCH_REPOSITORY = "ghcr.io/edgewatch/edgewatch"
EDGEWATCH_IMAGE = f"{EDGEWATCH_REPOSITORY}:{__version__}"
#: containerd v2.3's default sandbox image (internal/cri/config/config.go), built from the
#: Kubernetes module's build/pause/linux/pause.c by hack/binaries/build-node.sh.
PAUSE_IMAGE = "registry.k8s.io/pause:3.10.2"
PYTHON = "python3.11"
ROOT_PACKAGES = ("python3.11-minimal", "libpython3.11-stdlib", "coreutils", "dash", "libstdc++6")
#: Installed as dependencies of the roots but not needed in a container (package tools).
EXCLUDED_PACKAGES = frozenset({"dpkg", "tar", "debianutils"})
_SKIPPED_PREFIXES = ("/usr/share/doc", "/usr/share/man", "/usr/share/locale", "/usr/share/info",
                     "/usr/share/lintian", "/usr/share/bug", "/etc/")
_MERGED = {"/bin/": "/usr/bin/", "/sbin/": "/usr/sbin/", "/lib/": "/usr/lib/", "/lib64/": "/usr/lib64/"}
IMAGE_UID = 65532
#: Debian architecture -> the machine name in PyPI's wheel platform tags.
WHEEL_MACHINES = {"amd64": "x86_64", "arm64": "aarch64"}
#: Debian 12's glibc: wheels tagged manylinux_2_17 .. manylinux_2_36 run on it.
GLIBC_MINOR = 36
#: What ``make image`` builds: the two platforms docs/install.md lists.
MULTI_PLATFORMS = ("linux/amd64", "linux/arm64")
#: Builds etcd for one architecture (relative to the checkout); its inputs are part of the cache key.
ETCD_SCRIPT = "hack/binaries/build-etcd.sh"
ETCD_INPUTS = (ETCD_SCRIPT, "hack/binaries/etcd/go.mod", "hack/binaries/etcd/go.sum", "hack/binaries/etcd/main.go")
#: Debian architecture -> the ELF header's ``e_machine`` (glibc's elf.h: EM_X86_64, EM_AARCH64).
ELF_MACHINES = {"amd64": 62, "arm64": 183}
_Progress = Callable[[str], None]


class ImageError(RuntimeError):
    """An image could not be built (a command failed or the host lacks a package)."""


@dataclass(frozen=True)
class Images:
    """Paths of the OCI archives, and the names they carry."""

    edgewatch: Path
    pause: Path
    edgewatch_name: str = EDGEWATCH_IMAGE
    pause_name: str = PAUSE_IMAGE


def _run(argv: list[str], *, timeout_s: float = 600.0, env: dict[str, str] | None = None) -> str:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ImageError(f"{argv[0]}: {exc}") from exc
    if proc.returncode != 0:
        raise ImageError(f"{' '.join(argv[:4])} ... failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return proc.stdout


def _installed(package: str) -> bool:
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f", "${Status}", package], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.endswith(" installed")


def parse_depends(field: str) -> list[list[str]]:
    """``Depends``/``Pre-Depends`` text -> alternatives per dependency, package names only
    (versions and architecture qualifiers dropped). Pure."""
    result = []
    for dep in field.split(","):
        alts = [re.split(r"[\s(:]", a.strip(), maxsplit=1)[0] for a in dep.split("|")]
        alts = [a for a in alts if a]
        if alts:
            result.append(alts)
    return result


def debian_closure(roots: tuple[str, ...] = ROOT_PACKAGES, *, excluded: frozenset[str] = EXCLUDED_PACKAGES,
                   installed: Callable[[str], bool] = _installed,
                   depends: Callable[[str], str] | None = None) -> list[str]:
    """The installed packages ``roots`` need, transitively (the first installed alternative of
    each dependency), minus ``excluded``; sorted.

    Raises ImageError when a root is not installed.
    """
    def dpkg_depends(package: str) -> str:
        return _run(["dpkg-query", "-W", "-f", "${Pre-Depends}, ${Depends}", package], timeout_s=30)

    depends = depends or dpkg_depends
    for root in roots:
        if not installed(root):
            raise ImageError(f"Debian package {root} is not installed (apt-get install {root})")
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        package = todo.pop()
        if package in seen or package in excluded:
            continue
        seen.add(package)
        for alts in parse_depends(depends(package)):
            chosen = next((a for a in alts if a in seen or installed(a)), None)
            if chosen is not None:
                todo.append(chosen)
    return sorted(seen)


def merged_path(path: str) -> str:
    """A path as it lies on a merged-/usr system (``/bin/x`` -> ``/usr/bin/x``). Pure."""
    for old, new in _MERGED.items():
        if path.startswith(old):
            return new + path[len(old):]
    return path


def _merged_root(rootfs: Path) -> None:
    for link, target in (("bin", "usr/bin"), ("sbin", "usr/sbin"), ("lib", "usr/lib"), ("lib64", "usr/lib64")):
        (rootfs / target).mkdir(parents=True, exist_ok=True)
        (rootfs / link).symlink_to(target)


def _place(source: Path, listed: str, rootfs: Path, *, move: bool = False) -> bool:
    """Copy (or move) the file or symlink ``source``, installed at ``listed``, into ``rootfs`` at its
    merged-/usr path; the first package to ship a path wins."""
    if not listed.startswith("/") or listed.startswith(_SKIPPED_PREFIXES):
        return False
    if not source.is_symlink() and not source.is_file():
        return False
    dest = rootfs / merged_path(listed).lstrip("/")
    if dest.exists() or dest.is_symlink():
        return False
    dest.parent.mkdir(parents=True, exist_ok=True)
    if source.is_symlink():
        dest.symlink_to(os.readlink(source))
    elif move:
        os.replace(source, dest)
    else:
        shutil.copy2(source, dest)
    return True


def _finish_root(rootfs: Path) -> None:
    sh = rootfs / "usr/bin/sh"
    if not sh.exists() and not sh.is_symlink():
        sh.symlink_to("dash")


def _copy_packages(packages: list[str], rootfs: Path) -> int:
    _merged_root(rootfs)
    copied = 0
    for package in packages:
        for listed in _run(["dpkg-query", "-L", package], timeout_s=30).splitlines():
            copied += _place(Path(listed), listed, rootfs)
    _finish_root(rootfs)
    return copied


def host_architecture() -> str:
    """This host's Debian architecture (``dpkg --print-architecture``: ``amd64``, ``arm64``)."""
    return _run(["dpkg", "--print-architecture"], timeout_s=30).strip()


def foreign_debs(packages: list[str], arch: str) -> list[tuple[str, str]]:
    """``(URI, file name)`` of the ``.deb`` of each of ``packages`` for ``arch``: apt's candidate
    version (``apt-get download --print-uris``; ``Architecture: all`` packages without the
    qualifier), in ``packages``' order. Raises ImageError when apt does not know ``arch``."""
    foreign = _run(["dpkg", "--print-foreign-architectures"], timeout_s=30).split()
    if arch != host_architecture() and arch not in foreign:
        raise ImageError(f"apt does not know the architecture {arch} (make system-deps adds it: "
                         f"dpkg --add-architecture {arch} && apt-get update)")
    rows = _run(["dpkg-query", "-W", "-f", "${Package}\t${Architecture}\n", *packages], timeout_s=30)
    specs = [name if package_arch == "all" else f"{name}:{arch}"
             for name, package_arch in (row.split("\t") for row in rows.splitlines())]
    try:
        out = _run(["apt-get", "download", "--print-uris", *specs], timeout_s=120)
    except ImageError as exc:
        raise ImageError(f"{exc} (make system-deps runs apt-get update for {arch})") from exc
    found = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].startswith("'"):
            found.append((parts[0].strip("'"), parts[1]))
    if len(found) != len(specs):
        raise ImageError(f"apt-get download --print-uris listed {len(found)} files for {len(specs)} packages")
    return found


def _fetch_debs(packages: list[str], arch: str, folder: Path, progress: _Progress) -> list[Path]:
    """The ``.deb`` files of ``packages`` for ``arch`` (``foreign_debs``), downloaded by ``apt-get
    download`` into ``folder`` unless already there; in ``packages``' order."""
    folder.mkdir(parents=True, exist_ok=True)
    files = [name for _uri, name in foreign_debs(packages, arch)]
    missing = [f for f in files if not (folder / f).is_file()]
    if missing:
        progress(f"{arch}: apt-get download {len(missing)} Debian packages into {folder}")
        specs = [f"{f.split('_')[0]}{'' if f.endswith('_all.deb') else ':' + arch}={f.split('_')[1].replace('%3a', ':')}"
                 for f in missing]
        with tempfile.TemporaryDirectory(prefix="edgewatch-debs-", dir=folder) as tmp:
            try:
                proc = subprocess.run(["apt-get", "download", "-q", *specs], cwd=tmp, capture_output=True,
                                      text=True, timeout=900)
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise ImageError(f"apt-get download: {exc}") from exc
            if proc.returncode != 0:
                raise ImageError(f"apt-get download of {arch} packages failed (exit {proc.returncode}; "
                                 f"make system-deps runs apt-get update): {proc.stderr.strip()[-2000:]}")
            for f in missing:
                if not (Path(tmp) / f).is_file():
                    raise ImageError(f"apt-get download wrote no {f}")
                os.replace(Path(tmp) / f, folder / f)
    return [folder / f for f in files]


def _unpack_debs(debs: list[Path], rootfs: Path) -> int:
    """Unpack each ``.deb`` (``dpkg-deb -x``) and place its files as ``_copy_packages`` places installed ones."""
    _merged_root(rootfs)
    placed = 0
    for deb in debs:
        with tempfile.TemporaryDirectory(prefix="edgewatch-deb-") as tmp:
            _run(["dpkg-deb", "-x", str(deb), tmp], timeout_s=300)
            for dirpath, dirnames, filenames in os.walk(tmp):
                names = filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
                for name in sorted(names):
                    source = Path(dirpath) / name
                    placed += _place(source, "/" + os.path.relpath(source, tmp), rootfs, move=True)
    _finish_root(rootfs)
    return placed


def _write_base_files(rootfs: Path) -> None:
    etc = rootfs / "etc"
    etc.mkdir(exist_ok=True)
    (etc / "passwd").write_text(f"root:x:0:0:root:/root:/bin/sh\nnonroot:x:{IMAGE_UID}:{IMAGE_UID}::/home/nonroot:/bin/sh\n")
    (etc / "group").write_text(f"root:x:0:\nnonroot:x:{IMAGE_UID}:\n")
    (etc / "nsswitch.conf").write_text("passwd: files\ngroup: files\nhosts: files dns\n")
    for name in ("tmp", "var/tmp", "root", "home/nonroot", "var/lib/edgewatch", "proc", "sys", "dev", "run"):
        (rootfs / name).mkdir(parents=True, exist_ok=True)
    os.chmod(rootfs / "tmp", 0o1777)
    os.chmod(rootfs / "var/tmp", 0o1777)
    script = rootfs / "usr/local/bin/edgewatch"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(f"#!/usr/bin/{PYTHON}\nimport sys\nfrom edgewatch.cli import main\n\nsys.exit(main())\n")
    script.chmod(0o755)


def check_static_elf(path: Path, arch: str) -> None:
    """Raise ImageError unless ``path`` is a little-endian 64-bit ELF executable for ``arch`` with
    no program interpreter (``PT_INTERP``), i.e. statically linked."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ImageError(f"{path}: {exc}") from exc
    if data[:4] != b"\x7fELF" or len(data) < 64 or data[4] != 2 or data[5] != 1:
        raise ImageError(f"{path} is not a little-endian 64-bit ELF file")
    (machine,) = struct.unpack_from("<H", data, 18)
    if machine != ELF_MACHINES.get(arch):
        raise ImageError(f"{path} is an ELF file for e_machine {machine}, not {arch} ({ELF_MACHINES.get(arch)})")
    (phoff,) = struct.unpack_from("<Q", data, 32)
    phentsize, phnum = struct.unpack_from("<HH", data, 54)
    for i in range(phnum):
        (p_type,) = struct.unpack_from("<I", data, phoff + i * phentsize)
        if p_type == 3:  # PT_INTERP: needs a dynamic loader the image may not have
            raise ImageError(f"{path} is dynamically linked (it has a program interpreter)")


def ensure_etcd(repo: Path, arch: str, progress: _Progress) -> Path:
    """etcd for ``arch``, built (or found in the cache) by ``hack/binaries/build-etcd.sh <arch>``
    and checked to be a static ELF executable for ``arch``. Raises ImageError."""
    script = repo / ETCD_SCRIPT
    if not script.is_file():
        raise ImageError(f"{script} is missing: it builds the image's etcd")
    progress(f"{arch}: etcd ({ETCD_SCRIPT} {arch}: a few minutes the first time, cached after)")
    try:
        proc = subprocess.run(["bash", str(script), arch], capture_output=True, text=True, timeout=1800)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ImageError(f"building etcd for {arch} ({ETCD_SCRIPT} {arch}): {exc}") from exc
    if proc.returncode != 0:
        raise ImageError(f"building etcd for {arch} failed ({ETCD_SCRIPT} {arch}, exit {proc.returncode}; "
                         f"it needs Go and the Go module proxy): {proc.stderr.strip()[-2000:]}")
    lines = proc.stdout.strip().splitlines()
    etcd = Path(lines[-1]) / "etcd" if lines else Path("(nothing printed)")
    if not etcd.is_file():
        raise ImageError(f"{ETCD_SCRIPT} {arch} printed {proc.stdout.strip()!r}, which holds no etcd")
    check_static_elf(etcd, arch)
    return etcd


def wheel_platforms(arch: str) -> list[str]:
    """pip's ``--platform`` values for wheels that run on Debian 12 (glibc 2.36) on ``arch``. Pure."""
    machine = WHEEL_MACHINES.get(arch)
    if machine is None:
        raise ImageError(f"no wheel platform for the architecture {arch} (known: {', '.join(WHEEL_MACHINES)})")
    return [f"manylinux_2_{minor}_{machine}" for minor in range(GLIBC_MINOR, 16, -1)] + [f"manylinux2014_{machine}"]


def _install_edgewatch(repo: Path, rootfs: Path, progress: _Progress, *, arch: str | None = None) -> None:
    target = rootfs / "usr/lib/python3/dist-packages"
    target.mkdir(parents=True, exist_ok=True)
    progress(f"pip install {repo} (the Dockerfile's `pip install .`, pinned by pyproject.toml)"
             + (f", {arch} wheels" if arch else ""))
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1")
    with tempfile.TemporaryDirectory(prefix="edgewatch-src-") as src:
        # What the Dockerfile copies (pyproject.toml, README.md, src/), so the build's own
        # folders (build/, *.egg-info) land in the copy, never in the checkout.
        for name in ("pyproject.toml", "README.md"):
            shutil.copy2(repo / name, Path(src) / name)
        shutil.copytree(repo / "src", Path(src) / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        pip = [sys.executable, "-m", "pip"]
        if arch is None:
            _run([*pip, "install", "--quiet", "--no-compile", "--target", str(target), src], timeout_s=900, env=env)
        else:
            # edgewatch itself is pure Python: its wheel, then it and its pins from the platform's wheels.
            wheels = Path(src) / "wheels"
            _run([*pip, "wheel", "--quiet", "--no-deps", "--wheel-dir", str(wheels), src], timeout_s=900, env=env)
            platforms = [arg for p in wheel_platforms(arch) for arg in ("--platform", p)]
            _run([*pip, "install", "--quiet", "--no-compile", "--target", str(target), "--only-binary=:all:",
                  *platforms, "--python-version", PYTHON.removeprefix("python"), "--implementation", "cp",
                  *map(str, sorted(wheels.glob("edgewatch-*.whl")))], timeout_s=900, env=env)
    shutil.rmtree(target / "bin", ignore_errors=True)  # console scripts with this venv's shebang
    progress("byte-compiling the standard library and the packages")
    for folder in (rootfs / "usr/lib" / PYTHON, target):
        _run([f"/usr/bin/{PYTHON}", "-m", "compileall", "-q", "-j", "0", "-s", str(rootfs), "-p", "/", str(folder)],
             timeout_s=900)


def source_hash(repo: Path, packages: list[str], platforms: tuple[str, ...] = ()) -> str:
    """A digest of what the edgewatch image is built from: the package sources, pyproject.toml,
    the image-building modules, etcd's build script and wrapper module, the Debian package versions
    and (when given) the platforms (16 hex characters)."""
    h = hashlib.sha256()
    if platforms:
        h.update(",".join(platforms).encode())
    files = [repo / "pyproject.toml", Path(__file__), Path(__file__).with_name("ociimage.py")]
    files += [repo / name for name in ETCD_INPUTS]  # how /usr/local/bin/etcd is built
    files += sorted((repo / "src" / "edgewatch").rglob("*.py")) + sorted((repo / "src" / "edgewatch").rglob("*.yaml"))
    for path in files:
        h.update(str(path.relative_to(repo) if path.is_relative_to(repo) else path.name).encode())
        h.update(path.read_bytes())
    h.update(_run(["dpkg-query", "-W", "-f", "${Package}=${Version}\n", *packages], timeout_s=30).encode())
    return h.hexdigest()[:16]


def _architecture(platform: str) -> str:
    os_name, _, arch = platform.partition("/")
    if os_name != "linux" or arch not in WHEEL_MACHINES:
        raise ImageError(f"unsupported platform {platform!r} (known: {', '.join(f'linux/{a}' for a in WHEEL_MACHINES)})")
    return arch


def _build_platform(repo: Path, packages: list[str], arch: str, host_arch: str, tmp: Path,
                    progress: _Progress) -> PlatformImage:
    etcd_binary = ensure_etcd(repo, arch, progress)  # first: the slowest step when not cached
    rootfs = tmp / f"rootfs-{arch}"
    rootfs.mkdir()
    progress(f"{arch}: Debian files of {len(packages)} packages ({', '.join(ROOT_PACKAGES)} and their dependencies)")
    if arch == host_arch:
        _copy_packages(packages, rootfs)
    else:
        _unpack_debs(_fetch_debs(packages, arch, cache_dir() / "debs" / arch, progress), rootfs)
    _write_base_files(rootfs)
    _install_edgewatch(repo, rootfs, progress, arch=None if arch == host_arch else arch)
    etcd = rootfs / "usr/local/bin/etcd"  # as the Dockerfile's COPY --from=etcd (root's, 0755)
    shutil.copyfile(etcd_binary, etcd)
    etcd.chmod(0o755)
    progress(f"{arch}: writing the layer")
    layer = write_layer(rootfs, tmp / f"layer-{arch}.tar", owners={"home/nonroot": (IMAGE_UID, IMAGE_UID)})
    shutil.rmtree(rootfs)
    config = image_config(
        diff_ids=[layer.digest], entrypoint=["edgewatch"], user=f"{IMAGE_UID}:{IMAGE_UID}",
        env={"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"},
        labels={"org.opencontainers.image.title": "edgewatch", "org.opencontainers.image.version": __version__},
        architecture=arch,
    )
    return PlatformImage(layers=[layer], config=config)


def build_edgewatch_image(*, repo: Path, out: Path, progress: _Progress, platforms: tuple[str, ...] = ()) -> None:
    """Build ``EDGEWATCH_IMAGE`` from ``repo`` into the OCI archive ``out`` (see the module docstring):
    for this host's platform only by default (one manifest), or for each of ``platforms``
    (``linux/amd64``, ``linux/arm64``) as one multi-platform image index.

    Raises ImageError.
    """
    packages = debian_closure()
    host_arch = host_architecture()
    archs = [_architecture(p) for p in platforms] or [host_arch]
    with tempfile.TemporaryDirectory(prefix="edgewatch-image-") as tmp:
        images = [_build_platform(repo, packages, arch, host_arch, Path(tmp), progress) for arch in archs]
        tmp_out = out.with_suffix(".tmp")
        if platforms:
            write_oci_index(tmp_out, name=EDGEWATCH_IMAGE, images=images)
        else:
            write_oci_archive(tmp_out, name=EDGEWATCH_IMAGE, layers=images[0].layers, config=images[0].config)
        os.replace(tmp_out, out)


def build_pause_image(*, pause_binary: Path, out: Path) -> None:
    """Build ``PAUSE_IMAGE`` (``/pause`` as user 65535, as upstream's Dockerfile) into ``out``."""
    with tempfile.TemporaryDirectory(prefix="edgewatch-pause-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        rootfs.mkdir()
        shutil.copy2(pause_binary, rootfs / "pause")
        layer = write_layer(rootfs, Path(tmp) / "layer.tar")
        config = image_config(diff_ids=[layer.digest], entrypoint=["/pause"], user="65535:65535")
        tmp_out = out.with_suffix(".tmp")
        write_oci_archive(tmp_out, name=PAUSE_IMAGE, layers=[layer], config=config)
        os.replace(tmp_out, out)


def cache_dir() -> Path:
    """``$EDGEWATCH_CACHE/images`` or ``~/.cache/edgewatch/images``."""
    root = Path(os.environ.get("EDGEWATCH_CACHE") or Path.home() / ".cache" / "edgewatch")
    return root / "images"


def ensure_images(*, pause_binary: Path, repo: Path | None = None, progress: _Progress | None = None) -> Images:
    """The two archives, built on first use (about a minute) and cached (see the module docstring).

    Args:
        pause_binary: the static pause built by ``hack/binaries/build-node.sh``.
        repo: the checkout to install edgewatch from (default: the one this module was loaded from).
        progress: called with a line per build step (default: stderr).

    Raises ImageError (no checkout, a missing Debian package, pip or a copy failed).
    """
    report = progress or (lambda line: print(f"[edgewatch image] {line}", file=sys.stderr, flush=True))
    repo = repo or Path(__file__).resolve().parents[4]  # lab/src/edgewatch_lab/testing/x.py -> the checkout
    if not (repo / "pyproject.toml").is_file():
        raise ImageError(f"{repo} is not an edgewatch checkout (no pyproject.toml)")
    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    key = source_hash(repo, debian_closure())
    edgewatch_tar = folder / f"edgewatch-{__version__}-{key}.oci.tar"
    pause_tar = folder / f"pause-3.10.2-{hashlib.sha256(pause_binary.read_bytes()).hexdigest()[:16]}.oci.tar"
    if not pause_tar.exists():
        build_pause_image(pause_binary=pause_binary, out=pause_tar)
    if not edgewatch_tar.exists():
        report(f"building {EDGEWATCH_IMAGE} into {edgewatch_tar}")
        build_edgewatch_image(repo=repo, out=edgewatch_tar, progress=report)
        for old in folder.glob("edgewatch-*.oci.tar"):
            if old != edgewatch_tar and not old.name.endswith("-multi.oci.tar"):
                old.unlink(missing_ok=True)
        report(f"built {edgewatch_tar} ({edgewatch_tar.stat().st_size // (1 << 20)} MiB)")
    return Images(edgewatch=edgewatch_tar, pause=pause_tar)


def ensure_edgewatch_image(*, platforms: tuple[str, ...] = MULTI_PLATFORMS, repo: Path | None = None,
                           progress: _Progress | None = None) -> Path:
    """The multi-platform edgewatch archive (one image index, a manifest per entry of ``platforms``),
    built on first use (a minute or two) and cached as ``edgewatch-<version>-<key>-multi.oci.tar``.

    Raises ImageError (no checkout, a missing Debian package, apt, pip or a copy failed).
    """
    report = progress or (lambda line: print(f"[edgewatch image] {line}", file=sys.stderr, flush=True))
    repo = repo or Path(__file__).resolve().parents[4]
    if not (repo / "pyproject.toml").is_file():
        raise ImageError(f"{repo} is not an edgewatch checkout (no pyproject.toml)")
    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    packages = debian_closure()
    host_arch = host_architecture()
    foreign = [name for p in platforms if (arch := _architecture(p)) != host_arch
               for _uri, name in foreign_debs(packages, arch)]
    key = source_hash(repo, packages, (*platforms, *foreign))
    out = folder / f"edgewatch-{__version__}-{key}-multi.oci.tar"
    if not out.exists():
        report(f"building {EDGEWATCH_IMAGE} for {', '.join(platforms)} into {out}")
        build_edgewatch_image(repo=repo, out=out, progress=report, platforms=tuple(platforms))
        for old in folder.glob("edgewatch-*-multi.oci.tar"):
            if old != out:
                old.unlink(missing_ok=True)
        report(f"built {out} ({out.stat().st_size // (1 << 20)} MiB)")
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m edgewatch_lab.testing.images --pause PATH [--platforms ...]``: build (or find) the
    archives, print their paths: edgewatch's (the multi-platform one when ``--platforms`` is given),
    then pause."""
    parser = argparse.ArgumentParser(prog="python -m edgewatch_lab.testing.images", description=__doc__.split("\n\n")[0])
    parser.add_argument("--pause", type=Path, required=True, help="the static pause binary (make node-binaries)")
    parser.add_argument("--platforms", default="",
                        help=f"comma-separated, e.g. {','.join(MULTI_PLATFORMS)}: also build the multi-platform "
                             "archive and print it first (default: this host's platform only)")
    args = parser.parse_args(argv)
    try:
        images = ensure_images(pause_binary=args.pause)
        platforms = tuple(p.strip() for p in args.platforms.split(",") if p.strip())
        edgewatch = ensure_edgewatch_image(platforms=platforms) if platforms else images.edgewatch
    except ImageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(edgewatch)
    print(images.pause)
    return 0


if __name__ == "__main__":
    sys.exit(main())

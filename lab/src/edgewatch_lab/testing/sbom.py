"""The SBOM of edgewatch's image (CycloneDX JSON), made by CycloneDX's own generator from the image.

What it is for
    Each image ships with an SBOM from a well-kept tool, and a test checks that it lists
    edgewatch's pinned dependencies (``tests/integration/test_sbom.py``; ``make sbom`` writes it for
    the image ``make image`` builds).

How it is made
    * the Python packages' metadata (every ``*.dist-info`` folder under
      ``/usr/lib/python3/dist-packages``, where ``edgewatch_lab.testing.images`` has pip install
      edgewatch and its pins) is read from the image's OCI archive itself, one set per platform
      manifest, into a scratch folder;
    * ``cyclonedx-py environment`` (CycloneDX's Python generator, PyPI ``cyclonedx-bom``, in the
      ``test`` extra) reads them: its ``<python>`` argument is a two-line wrapper that runs this
      Python with ``-S`` (no host site-packages) and ``PYTHONPATH`` set to that folder, so the
      generator sees exactly the image's distributions, edgewatch's own included (as installed in
      the image, not read from this checkout: no ``--pyproject``), each with the dependencies its
      metadata declares; ``--output-reproducible`` drops the timestamp and serial number; the tool
      validates its output against the CycloneDX 1.6 schema;
    * the result is written next to the archive: ``<archive without .oci.tar>.cdx.json`` (or one
      ``<...>.<os>-<arch>.cdx.json`` per platform when the archive is a multi-platform index).

``check_sbom`` is the check the test and ``make sbom`` apply: schema-valid CycloneDX, edgewatch
itself, every ``[project] dependencies`` entry of pyproject.toml present, at its pinned version.

Limits: Python distributions only (the Debian files the image copies are not listed); whiteouts
in later layers are not applied (the images built here have one layer).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

__all__ = ["SbomError", "Sbom", "check_sbom", "generate_sbom", "image_sboms", "pinned_dependencies"]

SITE_PACKAGES = "usr/lib/python3/dist-packages"
SPEC_VERSION = "1.6"
_INDEX_TYPES = ("application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json")


class SbomError(RuntimeError):
    """The SBOM could not be made (no generator, an unreadable archive, the generator failed)."""


@dataclass(frozen=True)
class Sbom:
    """One written SBOM: its file and the platform (``linux/amd64``) it describes."""

    path: Path
    platform: str


def _generator() -> list[str]:
    script = Path(sys.executable).with_name("cyclonedx-py")
    if script.is_file():
        return [str(script)]
    if shutil.which("cyclonedx-py"):
        return ["cyclonedx-py"]
    raise SbomError("cyclonedx-py not found (pip install cyclonedx-bom; it is in edgewatch's `test` extra)")


def generate_sbom(site_packages: Path, out: Path, *, timeout_s: float = 300.0) -> Path:
    """Run ``cyclonedx-py environment`` on the distributions in ``site_packages``; write ``out``.

    Raises SbomError.
    """
    with tempfile.TemporaryDirectory(prefix="edgewatch-sbom-py-") as tmp:
        wrapper = Path(tmp) / "python"
        # The generator asks this "interpreter" for its sys.path: the image's packages and the
        # standard library only (-S: no site, so no host or venv site-packages).
        wrapper.write_text(f"#!/bin/sh\nPYTHONPATH='{site_packages}' exec '{sys.executable}' -S \"$@\"\n")
        wrapper.chmod(0o755)
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
        argv = [*_generator(), "environment", "--sv", SPEC_VERSION, "--of", "JSON", "--output-reproducible", "--validate", "-o", str(out),
                str(wrapper)]
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=env)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SbomError(f"cyclonedx-py: {exc}") from exc
    if proc.returncode != 0 or not out.is_file():
        raise SbomError(f"cyclonedx-py failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return out


def _manifests(tar: tarfile.TarFile, digest: str | None = None) -> list[dict[str, Any]]:
    """The image manifests under index.json (nested indexes followed), each with its blob's JSON."""
    index = json.load(_member(tar, "index.json" if digest is None else _blob(digest)))
    found = []
    for entry in index.get("manifests", []):
        if entry.get("mediaType") in _INDEX_TYPES:
            found += _manifests(tar, entry["digest"])
        else:
            found.append(json.load(_member(tar, _blob(entry["digest"]))))
    return found


def _blob(digest: str) -> str:
    algorithm, _, hexdigest = digest.partition(":")
    return f"blobs/{algorithm}/{hexdigest}"


def _member(tar: tarfile.TarFile, name: str):  # type: ignore[no-untyped-def]
    f = tar.extractfile(name)
    if f is None:
        raise SbomError(f"{name} is not a file in the archive")
    return f


def _extract_dist_info(tar: tarfile.TarFile, layer_digest: str, dest: Path) -> int:
    """Copy the ``*.dist-info`` files under SITE_PACKAGES of one layer blob into ``dest``."""
    count = 0
    with tarfile.open(fileobj=_member(tar, _blob(layer_digest)), mode="r|*") as layer:
        for info in layer:
            name = info.name.lstrip("./") if info.name.startswith("./") else info.name.lstrip("/")
            if not name.startswith(SITE_PACKAGES + "/") or not info.isfile():
                continue
            rel = name[len(SITE_PACKAGES) + 1:]
            parts = rel.split("/")
            if len(parts) < 2 or not parts[0].endswith(".dist-info") or ".." in parts:
                continue
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            source = layer.extractfile(info)
            assert source is not None
            target.write_bytes(source.read())
            count += 1
    return count


def image_sboms(archive: Path, *, out_dir: Path | None = None) -> list[Sbom]:
    """The SBOM of each platform in the OCI archive ``archive``, written next to it (or in ``out_dir``).

    Raises SbomError (not an OCI archive, no Python packages in the image, the generator failed).
    """
    stem = archive.name.removesuffix(".tar").removesuffix(".oci")
    folder = out_dir or archive.parent
    written = []
    try:
        with tarfile.open(archive) as tar:
            manifests = _manifests(tar)
            if not manifests:
                raise SbomError(f"{archive}: index.json lists no image")
            for manifest in manifests:
                config = json.load(_member(tar, _blob(manifest["config"]["digest"])))
                platform = f"{config.get('os', 'linux')}/{config.get('architecture', 'unknown')}"
                name = f"{stem}.cdx.json" if len(manifests) == 1 else f"{stem}.{platform.replace('/', '-')}.cdx.json"
                with tempfile.TemporaryDirectory(prefix="edgewatch-sbom-") as tmp:
                    count = sum(_extract_dist_info(tar, layer["digest"], Path(tmp)) for layer in manifest["layers"])
                    if count == 0:
                        raise SbomError(f"{archive} ({platform}): no Python distributions under /{SITE_PACKAGES}")
                    written.append(Sbom(path=generate_sbom(Path(tmp), folder / name),
                                        platform=platform))
    except (OSError, KeyError, tarfile.TarError, json.JSONDecodeError) as exc:
        raise SbomError(f"{archive}: {exc}") from exc
    return written


def pinned_dependencies(pyproject: Path) -> dict[str, str | None]:
    """``[project] dependencies`` of ``pyproject``: canonical name -> pinned version (``==``) or None."""
    project = tomllib.loads(pyproject.read_text())["project"]
    pins: dict[str, str | None] = {}
    for text in project.get("dependencies", []):
        req = Requirement(text)
        exact = [s.version for s in req.specifier if s.operator in ("==", "===")]
        pins[canonicalize_name(req.name)] = exact[0] if exact else None
    return pins


@functools.cache
def _validator(schema: Any) -> Any:
    from cyclonedx.validation.json import JsonStrictValidator

    return JsonStrictValidator(schema)


def check_sbom(bom: dict[str, Any], pyproject: Path, *, validate: bool = True) -> list[str]:
    """What is wrong with the CycloneDX JSON ``bom`` as edgewatch's SBOM (empty when nothing is):
    not schema-valid, edgewatch missing (as the root or a component), a dependency of
    ``pyproject`` missing, at another version than its pin or not a dependency of edgewatch's
    component in the dependency graph. ``validate=False`` skips the schema (about 3 s)."""
    from cyclonedx.schema import SchemaVersion

    problems = []
    if bom.get("bomFormat") != "CycloneDX":
        problems.append(f"bomFormat is {bom.get('bomFormat')!r}, not 'CycloneDX'")
    try:
        schema = SchemaVersion.from_version(str(bom.get("specVersion")))
    except ValueError:
        schema = None
        problems.append(f"unknown CycloneDX specVersion {bom.get('specVersion')!r}")
    if schema is not None and validate:
        error = _validator(schema).validate_str(json.dumps(bom))
        if error is not None:
            detail = getattr(error.data, "message", None) or str(error.data).splitlines()[0]
            problems.append(f"not valid CycloneDX {schema.to_version()}: {detail}")
    components: dict[str, set[str]] = {}
    names_by_ref: dict[str, str] = {}
    root = bom.get("metadata", {}).get("component")
    for c in [*bom.get("components", []), *([root] if root else [])]:
        name = canonicalize_name(c.get("name", ""))
        components.setdefault(name, set()).add(str(c.get("version")))
        if "bom-ref" in c:
            names_by_ref[c["bom-ref"]] = name
    project = tomllib.loads(pyproject.read_text())["project"]
    own = canonicalize_name(project["name"])
    pins = pinned_dependencies(pyproject)
    for name, version in sorted({own: project.get("version"), **pins}.items()):
        if name not in components:
            problems.append(f"{name} is not listed")
        elif version is not None and version not in components[name]:
            problems.append(f"{name} is listed at {', '.join(sorted(components[name]))}, pinned {version}")
    # The dependency graph: the image's edgewatch depends on each of its pins.
    own_refs = {ref for ref, name in names_by_ref.items() if name == own}
    depends = {names_by_ref.get(ref, ref) for d in bom.get("dependencies", []) if d.get("ref") in own_refs
               for ref in d.get("dependsOn", [])}
    if own in components:
        problems += [f"{own} does not depend on {name} in the dependency graph"
                     for name in sorted(set(pins) - depends)]
    return problems


def main(argv: list[str] | None = None) -> int:
    """``python -m edgewatch_lab.testing.sbom ARCHIVE``: write and check the SBOM(s), print their paths."""
    parser = argparse.ArgumentParser(prog="python -m edgewatch_lab.testing.sbom", description=__doc__.split("\n\n")[0])
    parser.add_argument("archive", type=Path, help="the image's OCI archive (make image prints it)")
    parser.add_argument("--pyproject", type=Path, default=Path(__file__).resolve().parents[4] / "pyproject.toml",
                        help="edgewatch's pyproject.toml (default: this checkout's)")
    args = parser.parse_args(argv)
    try:
        sboms = image_sboms(args.archive)
    except SbomError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    rc = 0
    for sbom in sboms:
        for problem in check_sbom(json.loads(sbom.path.read_text()), args.pyproject):
            print(f"error: {sbom.path} ({sbom.platform}): {problem}", file=sys.stderr)
            rc = 1
        print(sbom.path)
    return rc


if __name__ == "__main__":
    sys.exit(main())

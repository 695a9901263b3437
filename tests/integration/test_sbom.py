"""The SBOM of edgewatch's image: made by CycloneDX's generator (cyclonedx-py, PyPI
cyclonedx-bom) from the image the lab builds, and listing every dependency pyproject.toml pins.

The image is built here the way ``make image`` builds it (edgewatch_lab.testing.images, about 15 s
with pip's cache warm), into a temporary folder; the SBOM is made from that archive as ``make sbom``
makes it (edgewatch_lab.testing.sbom). A missing generator fails these tests, never skips them.
"""

from __future__ import annotations

import copy
import json
import shutil
import tarfile
import tomllib
from pathlib import Path
from typing import Any

import pytest
from packaging.utils import canonicalize_name

from edgewatch import __version__
from edgewatch_lab.testing import sbom as sbom_mod
from edgewatch_lab.testing.images import build_edgewatch_image
from edgewatch_lab.testing.ociimage import image_config, write_layer, write_oci_archive
from edgewatch_lab.testing.sbom import SbomError, check_sbom, generate_sbom, image_sboms, pinned_dependencies

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = REPO / "pyproject.toml"


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("image") / f"edgewatch-{__version__}.oci.tar"
    build_edgewatch_image(repo=REPO, out=out, progress=lambda line: None)
    return out


@pytest.fixture(scope="module")
def bom(image: Path) -> dict[str, Any]:
    sboms = image_sboms(image)
    assert [(s.path, s.platform) for s in sboms] == [(image.with_name(f"edgewatch-{__version__}.cdx.json"), "linux/amd64")]
    return json.loads(sboms[0].path.read_text())


def _components(bom: dict[str, Any]) -> dict[str, str]:
    return {canonicalize_name(c["name"]): c["version"] for c in bom["components"]}


def test_pyproject_pins_every_runtime_dependency() -> None:
    pins = pinned_dependencies(PYPROJECT)
    declared = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    assert len(pins) == len(declared) > 0
    assert all(version for version in pins.values()), pins  # every one is pinned (==)


def test_sbom_is_cyclonedx_from_the_generator(bom: dict[str, Any]) -> None:
    assert bom["bomFormat"] == "CycloneDX"
    assert bom["specVersion"] == sbom_mod.SPEC_VERSION
    tools = {t["name"]: t["version"] for t in bom["metadata"]["tools"]["components"]}
    assert "cyclonedx-py" in tools and "cyclonedx-python-lib" in tools
    assert check_sbom(bom, PYPROJECT) == []  # schema-valid, every pin listed, edgewatch depends on them


def test_sbom_lists_edgewatch_and_each_pin_at_its_version(bom: dict[str, Any]) -> None:
    listed = _components(bom)
    assert listed.get("edgewatch") == __version__
    for name, version in pinned_dependencies(PYPROJECT).items():
        assert listed.get(name) == version, f"{name}: SBOM has {listed.get(name)}, pyproject pins {version}"
    edgewatch_ref = next(c["bom-ref"] for c in bom["components"] if c["name"] == "edgewatch")
    depends = next(d["dependsOn"] for d in bom["dependencies"] if d["ref"] == edgewatch_ref)
    names = {canonicalize_name(ref.split("==")[0]) for ref in depends}
    assert set(pinned_dependencies(PYPROJECT)) <= names


def test_check_detects_a_dependency_removed_or_changed(bom: dict[str, Any]) -> None:
    pins = pinned_dependencies(PYPROJECT)
    name = sorted(pins)[0]
    removed = copy.deepcopy(bom)
    removed["components"] = [c for c in removed["components"] if canonicalize_name(c["name"]) != name]
    assert f"{name} is not listed" in check_sbom(removed, PYPROJECT, validate=False)

    bumped = copy.deepcopy(bom)
    for c in bumped["components"]:
        if canonicalize_name(c["name"]) == name:
            c["version"] = "0.0.0"
    assert f"{name} is listed at 0.0.0, pinned {pins[name]}" in check_sbom(bumped, PYPROJECT, validate=False)

    no_edgewatch = copy.deepcopy(bom)
    no_edgewatch["components"] = [c for c in no_edgewatch["components"] if c["name"] != "edgewatch"]
    assert "edgewatch is not listed" in check_sbom(no_edgewatch, PYPROJECT, validate=False)

    invalid = copy.deepcopy(bom)
    invalid["components"][0]["type"] = "not-a-type"
    assert any(p.startswith("not valid CycloneDX 1.6") for p in check_sbom(invalid, PYPROJECT))


def test_generator_on_an_environment_missing_a_pin_is_caught(image: Path, tmp_path: Path) -> None:
    """The SBOM comes from what is installed: drop one pinned distribution from the image's
    packages, regenerate, and the check names it."""
    site = tmp_path / "site"
    with tarfile.open(image) as tar:
        (manifest,) = sbom_mod._manifests(tar)
        for layer in manifest["layers"]:
            sbom_mod._extract_dist_info(tar, layer["digest"], site)
    name = "click"
    assert name in pinned_dependencies(PYPROJECT)
    (dropped,) = [d for d in site.iterdir() if canonicalize_name(d.name.split("-")[0]) == name]
    shutil.rmtree(dropped)
    out = generate_sbom(site, tmp_path / "partial.cdx.json")
    problems = check_sbom(json.loads(out.read_text()), PYPROJECT, validate=False)
    assert f"{name} is not listed" in problems
    assert f"edgewatch does not depend on {name} in the dependency graph" in problems


def test_an_image_without_python_packages_is_refused(tmp_path: Path) -> None:
    rootfs = tmp_path / "rootfs"
    (rootfs / "bin").mkdir(parents=True)
    (rootfs / "bin" / "true").write_text("")
    layer = write_layer(rootfs, tmp_path / "layer.tar")
    archive = tmp_path / "empty.oci.tar"
    write_oci_archive(archive, name="example/empty:1", layers=[layer],
                      config=image_config(diff_ids=[layer.digest], entrypoint=["/bin/true"]))
    with pytest.raises(SbomError, match="no Python distributions"):
        image_sboms(archive)

"""The OCI archive writer and the image builder's pure parts (``edgewatch_lab.testing.ociimage``,
``edgewatch_lab.testing.images``)."""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
from pathlib import Path

import pytest

from edgewatch_lab.testing.images import ImageError, debian_closure, merged_path, parse_depends
from edgewatch_lab.testing.ociimage import image_config, write_layer, write_oci_archive


def tree(root: Path) -> Path:
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/bin/tool").write_text("#!/bin/sh\n")
    os.chmod(root / "usr/bin/tool", 0o755)
    (root / "bin").symlink_to("usr/bin")
    (root / "home/nonroot").mkdir(parents=True)
    return root


def members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


def test_layer_is_deterministic_and_keeps_modes_links_and_owners(tmp_path):
    root = tree(tmp_path / "root")
    a = write_layer(root, tmp_path / "a.tar", owners={"home/nonroot": (65532, 65532)})
    b = write_layer(root, tmp_path / "b.tar", owners={"home/nonroot": (65532, 65532)})
    assert a.digest == b.digest and a.size == (tmp_path / "a.tar").stat().st_size
    assert a.digest == "sha256:" + hashlib.sha256((tmp_path / "a.tar").read_bytes()).hexdigest()
    with tarfile.open(tmp_path / "a.tar") as tar:
        by_name = {m.name: m for m in tar.getmembers()}
    assert by_name["bin"].issym() and by_name["bin"].linkname == "usr/bin"
    assert by_name["usr/bin/tool"].mode & 0o777 == 0o755 and by_name["usr/bin/tool"].uid == 0
    assert (by_name["home/nonroot"].uid, by_name["home/nonroot"].gid) == (65532, 65532)


def test_archive_is_an_oci_layout_that_names_the_image(tmp_path):
    layer = write_layer(tree(tmp_path / "root"), tmp_path / "layer.tar")
    config = image_config(diff_ids=[layer.digest], entrypoint=["edgewatch"], user="65532:65532", env={"A": "1"})
    digest = write_oci_archive(tmp_path / "img.tar", name="ghcr.io/edgewatch/edgewatch:0.1.0", layers=[layer],
                               config=config)
    files = members(tmp_path / "img.tar")
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    [entry] = json.loads(files["index.json"])["manifests"]
    assert entry["digest"] == digest
    assert entry["annotations"]["io.containerd.image.name"] == "ghcr.io/edgewatch/edgewatch:0.1.0"
    assert entry["annotations"]["org.opencontainers.image.ref.name"] == "0.1.0"
    for name, data in files.items():  # every blob is content-addressed
        if name.startswith("blobs/sha256/"):
            assert name.rsplit("/", 1)[1] == hashlib.sha256(data).hexdigest()
    manifest = json.loads(files[f"blobs/sha256/{digest[7:]}"])
    stored = json.loads(files[f"blobs/sha256/{manifest['config']['digest'][7:]}"])
    assert stored["rootfs"]["diff_ids"] == [layer.digest] == [m["digest"] for m in manifest["layers"]]
    assert (stored["os"], stored["architecture"]) == ("linux", "amd64")
    assert stored["config"]["Entrypoint"] == ["edgewatch"] and stored["config"]["Env"] == ["A=1"]


def test_archive_refuses_a_config_that_does_not_list_its_layers(tmp_path):
    layer = write_layer(tree(tmp_path / "root"), tmp_path / "layer.tar")
    with pytest.raises(ValueError, match="diff_ids"):
        write_oci_archive(tmp_path / "img.tar", name="x:1", layers=[layer],
                          config=image_config(diff_ids=[], entrypoint=["x"]))


def test_parse_depends_keeps_names_and_alternatives():
    assert parse_depends("libc6 (>= 2.34), libssl3 | libssl1.1, python3:any,  ") == [
        ["libc6"], ["libssl3", "libssl1.1"], ["python3"]]
    assert parse_depends(", ") == []


def test_debian_closure_follows_installed_alternatives_and_skips_excluded():
    deps = {"root": "a, b | c, dpkg", "a": "libc6", "b": "", "c": "", "libc6": "", "dpkg": "tar"}
    installed = {"root", "a", "c", "libc6", "dpkg", "tar"}
    got = debian_closure(("root",), excluded=frozenset({"dpkg"}), installed=installed.__contains__,
                         depends=deps.__getitem__)
    assert got == ["a", "c", "libc6", "root"]


def test_debian_closure_refuses_a_missing_root():
    with pytest.raises(ImageError, match="not installed"):
        debian_closure(("nope",), installed=lambda p: False, depends=lambda p: "")


@pytest.mark.parametrize(("path", "merged"), [("/bin/sh", "/usr/bin/sh"), ("/lib/x86_64-linux-gnu/libc.so.6",
                         "/usr/lib/x86_64-linux-gnu/libc.so.6"), ("/usr/bin/python3.11", "/usr/bin/python3.11"),
                         ("/lib64/ld-linux-x86-64.so.2", "/usr/lib64/ld-linux-x86-64.so.2")])
def test_merged_path(path, merged):
    assert merged_path(path) == merged


def test_index_lists_one_manifest_per_platform_under_one_name(tmp_path):
    from edgewatch_lab.testing.ociimage import PlatformImage, write_oci_index

    images = []
    for arch in ("amd64", "arm64"):
        root = tmp_path / arch
        (root / "usr/bin").mkdir(parents=True)
        (root / "usr/bin/tool").write_text(arch)
        layer = write_layer(root, tmp_path / f"{arch}.tar")
        images.append(PlatformImage(layers=[layer], config=image_config(diff_ids=[layer.digest], entrypoint=["x"],
                                                                          architecture=arch)))
    digest = write_oci_index(tmp_path / "img.tar", name="ghcr.io/edgewatch/edgewatch:0.1.0", images=images)
    files = members(tmp_path / "img.tar")
    [entry] = json.loads(files["index.json"])["manifests"]  # one name for every platform
    assert entry["digest"] == digest and entry["mediaType"] == "application/vnd.oci.image.index.v1+json"
    assert entry["annotations"]["io.containerd.image.name"] == "ghcr.io/edgewatch/edgewatch:0.1.0"
    listed = json.loads(files[f"blobs/sha256/{digest[7:]}"])["manifests"]
    assert [d["platform"] for d in listed] == [{"os": "linux", "architecture": "amd64"},
                                               {"os": "linux", "architecture": "arm64"}]
    for descriptor, image in zip(listed, images, strict=True):
        manifest = json.loads(files[f"blobs/sha256/{descriptor['digest'][7:]}"])
        config = json.loads(files[f"blobs/sha256/{manifest['config']['digest'][7:]}"])
        assert config["architecture"] == descriptor["platform"]["architecture"]
        assert [m["digest"] for m in manifest["layers"]] == [image.layers[0].digest]
    for name, data in files.items():
        if name.startswith("blobs/sha256/"):
            assert name.rsplit("/", 1)[1] == hashlib.sha256(data).hexdigest()
    with pytest.raises(ValueError, match="one image per platform"):
        write_oci_index(tmp_path / "twice.tar", name="x:1", images=[images[0], images[0]])


def test_wheel_platforms_cover_debian_12_glibc_per_architecture():
    from edgewatch_lab.testing.images import wheel_platforms

    arm = wheel_platforms("arm64")
    assert {"manylinux2014_aarch64", "manylinux_2_17_aarch64", "manylinux_2_28_aarch64",
            "manylinux_2_36_aarch64"} <= set(arm)
    assert "manylinux_2_37_aarch64" not in arm and all("aarch64" in p for p in arm)
    assert "manylinux_2_17_x86_64" in wheel_platforms("amd64")
    with pytest.raises(ImageError, match="riscv64"):
        wheel_platforms("riscv64")

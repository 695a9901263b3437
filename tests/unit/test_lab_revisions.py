"""The lab's other releases (edgewatch_lab.testing.revisions): which image tags name a revision,
and the revision's tree unpacked from this repository's history."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgewatch_lab.testing.revisions import RevisionError, image_revision, image_tag, revision_tree

#: release 0.1.0 (CHANGELOG.md)
RELEASE_0_1_0 = "fae0b3b"


@pytest.mark.parametrize(("image", "revision"), [
    ("ghcr.io/edgewatch/edgewatch:git-fae0b3b", "fae0b3b"),
    ("localhost:5000/edgewatch:git-abc", "abc"),       # a registry port is not a tag
    ("ghcr.io/edgewatch/edgewatch:0.1.0", None),
    ("ghcr.io/edgewatch/edgewatch:git-", None),
    ("localhost:5000/edgewatch", None),
    ("edgewatch", None),
])
def test_only_a_git_tag_names_a_revision(image: str, revision: str | None) -> None:
    assert image_revision(image) == revision


def test_image_tag_round_trips() -> None:
    assert image_revision("ghcr.io/edgewatch/edgewatch:" + image_tag(RELEASE_0_1_0)) == RELEASE_0_1_0


def test_the_previous_release_unpacks_once(tmp_path: Path) -> None:
    tree = revision_tree(RELEASE_0_1_0, cache=tmp_path)
    assert (tree / "src" / "edgewatch" / "__init__.py").is_file()
    assert (tree / "deploy" / "kustomization.yaml").is_file()
    assert "PROTOCOL_VERSION: Final = 4" in (tree / "src" / "edgewatch" / "core" / "protocol.py").read_text()
    assert revision_tree(RELEASE_0_1_0, cache=tmp_path) == tree  # made once
    assert [p.name for p in (tmp_path / "revisions").iterdir()] == [tree.name]  # no temporary left


def test_an_unknown_revision_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(RevisionError, match="git rev-parse"):
        revision_tree("no-such-revision-xyz", cache=tmp_path)

"""Another release of edgewatch, for the lab: the product's source and install files of a git
revision of this repository, unpacked once into the cache.

The lab's "image" is this machine's Python (``edgewatch_lab.testing.podsetup``); an image tagged
``git-<revision>`` runs that revision's ``src/`` instead of this checkout's (the same virtualenv,
so the revision's dependencies must be installed: a dependency the product drops stays in the
lab's own, lab/pyproject.toml, while a release the lab plays needs it). That is how the
playground installs the previous release (CHANGELOG.md names the commit each release was cut
from) and rolls between releases.

``revision_tree`` runs ``git archive`` on this checkout's repository (which must have the commit:
a shallow clone may not) into ``$EDGEWATCH_CACHE/revisions/<commit>/`` (default
``~/.cache/edgewatch``); only ``src/``, ``deploy/`` and ``charts/`` are unpacked. A commit's
tree never changes, so the folder is made once and reused; it is written to a temporary folder
and renamed, so a crash leaves no half tree.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

import edgewatch

__all__ = ["IMAGE_TAG_PREFIX", "RevisionError", "image_revision", "image_tag", "repository_root", "revision_tree"]

#: An edgewatch image tag ``git-<revision>`` means "that revision's code" in the lab.
IMAGE_TAG_PREFIX = "git-"
_PARTS = ("src", "deploy", "charts")


class RevisionError(RuntimeError):
    """The revision cannot be unpacked (unknown commit, no git, not a checkout)."""


def repository_root() -> Path:
    """This checkout's root (where ``src/edgewatch`` lives)."""
    return Path(edgewatch.__file__).resolve().parents[2]


def image_tag(revision: str) -> str:
    """The image tag that runs ``revision``'s code in the lab."""
    return IMAGE_TAG_PREFIX + revision


def image_revision(image: str) -> str | None:
    """The revision an image reference names (``...:git-<revision>``), or None for any other tag."""
    name, _, tag = image.rpartition(":")
    if not name or "/" in tag or not tag.startswith(IMAGE_TAG_PREFIX):
        return None
    return tag[len(IMAGE_TAG_PREFIX):] or None


def _git(repo: Path, *args: str) -> bytes:
    try:
        done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RevisionError(f"git {' '.join(args)}: {exc}") from exc
    if done.returncode != 0:
        raise RevisionError(f"git {' '.join(args)}: {done.stderr.decode(errors='replace').strip()}")
    return done.stdout


def revision_tree(revision: str, *, repo: Path | None = None, cache: Path | None = None) -> Path:
    """The folder holding ``src/``, ``deploy/`` and ``charts/`` (those it has) of ``revision``.

    Raises:
        RevisionError: git failed (unknown revision, not a repository).
    """
    repo = repo or repository_root()
    commit = _git(repo, "rev-parse", "--verify", f"{revision}^{{commit}}").decode().strip()
    root = cache or Path(os.environ.get("EDGEWATCH_CACHE") or Path.home() / ".cache" / "edgewatch")
    out = root / "revisions" / commit
    if (out / "src" / "edgewatch").is_dir():
        return out
    present = set(_git(repo, "ls-tree", "--name-only", commit).decode().split())
    parts = [p for p in _PARTS if p in present]
    if "src" not in parts:
        raise RevisionError(f"{revision} ({commit[:12]}) has no src/")
    archive = _git(repo, "archive", "--format=tar", commit, *parts)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{commit[:12]}-", dir=out.parent))
    try:
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        try:
            tmp.rename(out)
        except OSError:
            if not (out / "src" / "edgewatch").is_dir():  # not a concurrent twin: a real failure
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out

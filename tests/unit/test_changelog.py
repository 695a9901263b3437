"""CHANGELOG.md (Keep a Changelog): every release has a version, a date and the commit it was cut from,
that commit exists in this repository, and pyproject.toml's version is the newest release (or an
``Unreleased`` section is there for what comes after it)."""

from __future__ import annotations

import datetime as dt
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHANGELOG = ROOT / "CHANGELOG.md"
HEADER = re.compile(r"^## \[(?P<name>[^\]]+)\](?: - (?P<date>\S+))?[ \t]*$", re.MULTILINE)
VERSION = re.compile(r"^\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.-]+)?$")
COMMIT = re.compile(r"\b[0-9a-f]{40}\b")


def _sections(text: str) -> list[tuple[str, str | None, str]]:
    """(name, date, body) of every ``## [...]`` section, in file order."""
    heads = list(HEADER.finditer(text))
    return [(m["name"], m["date"], text[m.end(): heads[i + 1].start() if i + 1 < len(heads) else len(text)])
            for i, m in enumerate(heads)]


def _releases() -> list[tuple[str, str | None, str]]:
    return [s for s in _sections(CHANGELOG.read_text()) if s[0] != "Unreleased"]


def test_every_section_is_unreleased_or_a_dated_version() -> None:
    sections = _sections(CHANGELOG.read_text())
    assert sections, "no ## [...] section"
    names = [name for name, _, _ in sections]
    assert names.count("Unreleased") <= 1
    if "Unreleased" in names:
        assert names[0] == "Unreleased", "Unreleased comes first"
    releases = _releases()
    assert releases, "no release recorded"
    for name, date, _ in releases:
        assert VERSION.match(name), f"release {name!r} is not a version"
        assert date is not None, f"release {name} has no date"
        dt.date.fromisoformat(date)  # raises on a malformed date


def test_releases_are_newest_first() -> None:
    def key(v: str) -> tuple[int, ...]:
        return tuple(int(x) for x in re.split(r"[-+]", v)[0].split("."))
    versions = [name for name, _, _ in _releases()]
    assert versions == sorted(versions, key=key, reverse=True)
    assert len(set(versions)) == len(versions)
    dates = [date for _, date, _ in _releases()]
    assert dates == sorted(dates, reverse=True)  # type: ignore[type-var]


def test_the_package_version_is_the_newest_release_or_unreleased_is_there() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    names = [name for name, _, _ in _sections(CHANGELOG.read_text())]
    releases = [n for n in names if n != "Unreleased"]
    assert releases[0] == version or "Unreleased" in names, (version, names)
    assert version in releases or "Unreleased" in names


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs the git checkout")
def test_every_release_names_a_commit_of_this_repository() -> None:
    for name, _, body in _releases():
        commits = COMMIT.findall(body)
        assert len(commits) == 1, f"release {name} names {len(commits)} full commit hashes, not one"
        found = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{commits[0]}^{{commit}}"],
                               capture_output=True, timeout=30, check=False)
        assert found.returncode == 0, f"release {name}: commit {commits[0]} not in this repository"


def test_the_parser_finds_what_a_changelog_holds() -> None:
    text = "# Changelog\n\n## [Unreleased]\n\n- x\n\n## [1.2.0] - 2026-01-02\n\nCut from `" + "a" * 40 + "`.\n"
    assert _sections(text) == [("Unreleased", None, "\n\n- x\n\n"),
                               ("1.2.0", "2026-01-02", "\n\nCut from `" + "a" * 40 + "`.\n")]

"""promtool and helm for the monitoring and chart tests, as ``make binaries`` builds them, and a
runner for their commands."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from edgewatch_lab.testing.binaries import BinariesError, ensure_helm, ensure_promtool


def _built(ensure: Callable[..., Path]) -> Path:
    """The binary ``ensure`` builds (cached: a no-op then); a failed build fails the tests."""
    try:
        return ensure(build_timeout_s=1800)
    except BinariesError as exc:
        pytest.fail(f"{exc}; run `make binaries`")


@pytest.fixture(scope="module")
def promtool() -> Path:
    """promtool, as `make binaries` builds it (cached: a no-op then); a failed build fails the tests."""
    return _built(ensure_promtool)


@pytest.fixture(scope="module")
def helm() -> Path:
    """helm, as `make binaries` builds it (cached: a no-op then); a failed build fails the tests."""
    return _built(ensure_helm)


def run(*args: str | Path, cwd: Path | None = None, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
    """Run a command, capturing its output as text."""
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout_s, cwd=cwd)

"""SuperEdge v0.9.0's edge-health and edge-health-admission (docs/peers.md's peer system) build from the
Go module proxy through hack/binaries/superedge and start: both print their usage with ``--help``,
and edge-health gets through its start-up (cobra, pflag, klog, client-go's JSON codecs: the
reflect2 crash that v0.9.0's own reflect2 v1.0.1 causes under Go >= 1.18 would show here).

Marked ``peers``: ``make peers`` (``pytest -m peers``) runs the peer systems' tests alone; ``make
test`` runs this one too, as the smoke run of the comparison's build. A failed build fails the test
(ensure_superedge raises); it is never skipped.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from edgewatch_lab.testing.binaries import SUPEREDGE_BINARY_NAMES, ensure_superedge

pytestmark = pytest.mark.peers

# Flags edge-health v0.9.0 declares (cmd/edge-health/app/options and pkg/edge-health/options).
EDGE_HEALTH_FLAGS = ("--kubeconfig", "--hostname", "--masterurl", "--kubeletplugin", "--kubeletauthplugin",
                     "--pingplugin", "--healthcheckperiod", "--healthcheckscoreline", "--communicateperiod",
                     "--communicatetimetout", "--communicateretrytime", "--communicateserverport",
                     "--voteperiod", "--votetimeout")


@pytest.fixture(scope="module")
def superedge_dir() -> Path:
    """The folder with both SuperEdge binaries (built on first use, about 5 minutes cold)."""
    return ensure_superedge()


def _help(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(path), "--help"], capture_output=True, text=True, timeout=60, check=False)


def test_both_binaries_are_built(superedge_dir: Path) -> None:
    for name in SUPEREDGE_BINARY_NAMES:
        assert (superedge_dir / name).is_file(), f"{superedge_dir / name} missing"


def test_edge_health_help_lists_its_flags(superedge_dir: Path) -> None:
    result = _help(superedge_dir / "edge-health")
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "panic" not in out and "fatal error" not in out, out
    for flag in EDGE_HEALTH_FLAGS:
        assert flag in out, f"edge-health --help lacks {flag}:\n{out}"


def test_edge_health_admission_help(superedge_dir: Path) -> None:
    result = _help(superedge_dir / "edge-health-admission")
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "panic" not in out and "fatal error" not in out, out
    assert "Usage" in out or "usage" in out, out

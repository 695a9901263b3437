"""One short run of ``make bench-coordinator`` (bench/coordinator_pod.py) so it cannot silently
break: a pool of 3 with the real pool-coordinator program, its etcd, the sessions and the recovery;
the bench itself fails (exit 1) if the pod was not Ready, a session did not join, the leader did
not write or the recovery did not complete. Figures come from the real run, not from here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.controlplane

BENCH = Path(__file__).resolve().parents[2] / "bench" / "coordinator_pod.py"


def test_the_coordinator_bench_runs_and_checks_itself(binaries) -> None:  # type: ignore[no-untyped-def]
    run = subprocess.run([sys.executable, str(BENCH), "3", "--seconds", "8", "--warmup", "2", "--services", "20",
                          "--churn", "2", "--recovery"], capture_output=True, text=True, timeout=420, check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    rows = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    assert len(rows) == 1 and rows[0]["ok"], rows
    assert rows[0]["total_rss_mib"] > 0, rows[0]

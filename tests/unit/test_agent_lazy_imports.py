"""What an agent process loads before it knows whether its pool has a coordinator: not gRPC,
protobuf, aetcd, structlog or rich (gRPC alone is about 11 MiB of RSS and 7 threads once used).
Checked in a fresh interpreter, as ``edgewatch agent`` starts."""

from __future__ import annotations

import json
import subprocess
import sys


def test_an_agent_without_a_coordinator_loads_no_grpc_aetcd_or_logging_framework() -> None:
    code = ("import json, sys, edgewatch.cli, edgewatch.agent.main, edgewatch.agent.agent; "
            "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))")
    loaded = set(json.loads(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                                           text=True, timeout=120).stdout))
    assert "edgewatch" in loaded and "aiohttp" in loaded  # the check sees what was imported
    assert loaded.isdisjoint({"grpc", "aetcd", "structlog", "rich"}), loaded & {"grpc", "aetcd", "structlog", "rich"}
    assert not any(m == "google" for m in loaded), "protobuf (google.protobuf) was imported"


def test_the_coordinator_is_still_there_when_asked_for() -> None:
    code = ("import sys, edgewatch.agent.coordinator as c; p = c.PoolCoordinator; "
            "print('grpc' in sys.modules, p.__module__)")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=120).stdout
    assert out.split() == ["True", "edgewatch.agent.coordinator.pool"]

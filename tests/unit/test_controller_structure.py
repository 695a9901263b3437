"""The controller's shape: it imports nothing of the agent (no etcd/gRPC client, no aiohttp), and no
module of it is over ~600 lines (one concept per module)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import edgewatch

FORBIDDEN = ("aetcd", "grpc", "aiohttp", "edgewatch.agent")


def test_controller_imports_nothing_of_the_agent() -> None:
    code = ("import sys, edgewatch.controller.main, edgewatch.status; "
            f"print(sorted(m for m in sys.modules if m.startswith({FORBIDDEN!r})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out


def test_no_controller_module_is_over_600_lines() -> None:
    root = Path(edgewatch.__file__).parent
    files = [*root.joinpath("controller").glob("*.py"), root / "kube" / "leases.py", root / "timefmt.py",
             root / "logs.py", root / "status.py"]
    sizes = {f.name: len(f.read_text().splitlines()) for f in files}
    assert all(n <= 620 for n in sizes.values()), sizes

"""The layer contracts of pyproject.toml's ``[tool.importlinter]``, checked by import-linter on the
installed packages: core imports nothing of ours, the agent and the controller do not import each
other, only the cloud door (``edgewatch.kube``) imports the Kubernetes client (lightkube) and its
HTTP library (httpx2), the product (``edgewatch``) never imports the lab (``edgewatch_lab``)
(docs/architecture.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINT = Path(sys.executable).with_name("lint-imports")


def _lint(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(LINT), "--no-cache", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_every_layer_contract_is_kept() -> None:
    done = _lint()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 kept, 0 broken" in done.stdout, done.stdout


def test_a_broken_contract_is_reported(tmp_path: Path) -> None:
    """The check can fail: the simulator does run the agents' own code."""
    config = tmp_path / "contracts.toml"
    config.write_text('[tool.importlinter]\nroot_packages = ["edgewatch", "edgewatch_lab"]\n\n'
                      '[[tool.importlinter.contracts]]\nname = "sim without the agent"\ntype = "forbidden"\n'
                      'source_modules = ["edgewatch_lab.sim"]\nforbidden_modules = ["edgewatch.agent"]\n')
    done = _lint("--config", str(config))
    assert done.returncode != 0 and "BROKEN" in done.stdout, done.stdout + done.stderr


def test_a_client_import_outside_the_door_is_reported(tmp_path: Path) -> None:
    """The door contract can fail: the lab imports lightkube directly (it may; the product may not)."""
    config = tmp_path / "contracts.toml"
    config.write_text('[tool.importlinter]\nroot_packages = ["edgewatch", "edgewatch_lab"]\n'
                      'include_external_packages = true\n\n'
                      '[[tool.importlinter.contracts]]\nname = "the lab through the door"\ntype = "forbidden"\n'
                      'source_modules = ["edgewatch_lab"]\nforbidden_modules = ["lightkube"]\n'
                      'allow_indirect_imports = true\n')
    done = _lint("--config", str(config))
    assert done.returncode != 0 and "BROKEN" in done.stdout and "lightkube" in done.stdout, done.stdout + done.stderr


def test_no_asyncio_wait_for_in_the_product() -> None:
    """On Python 3.11 ``asyncio.wait_for`` drops a cancellation that lands as what it awaits
    completes; in a loop that hangs shutdown (the coordinator test's 600 s). The product
    uses ``asyncio.timeout`` or ``edgewatch.waits`` instead."""
    offenders = [f"{path.relative_to(ROOT)}:{n}" for path in sorted((ROOT / "src" / "edgewatch").rglob("*.py"))
                 for n, line in enumerate(path.read_text().splitlines(), 1)
                 if "wait_for(" in line and not line.lstrip().startswith("#") and "asyncio.wait_for" in line]
    assert offenders == [], offenders


def test_test_modules_have_unique_basenames() -> None:
    """pytest imports test modules by basename (no __init__.py in tests/): two files of the same
    name in unit/ and integration/ stop the whole collection ("import file mismatch")."""
    names: dict[str, list[str]] = {}
    for path in (ROOT / "tests").rglob("test_*.py"):
        names.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    assert {n: p for n, p in names.items() if len(p) > 1} == {}

"""The agent's shape (docs/architecture.md, "One direction of data"): ``edgewatch.agent.agent`` is a composition
root wired with objects, not lambdas reaching back into it; no part imports it; every module says
what it is for and stays under ~600 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import edgewatch.agent

AGENT = Path(edgewatch.agent.__file__).parent
MODULES = sorted(AGENT.rglob("*.py"))
ROOTS = {AGENT / "agent.py", AGENT / "main.py"}  # the composition root and the command that runs it


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def test_the_composition_root_hands_its_parts_objects_not_lambdas() -> None:
    lambdas = [node.lineno for node in ast.walk(_tree(AGENT / "agent.py")) if isinstance(node, ast.Lambda)]
    assert lambdas == [], f"lambdas in agent.py at lines {lambdas}"


def test_no_part_imports_the_composition_root() -> None:
    reaching_back = []
    for path in set(MODULES) - ROOTS:
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.ImportFrom) and node.module == "edgewatch.agent.agent":
                reaching_back.append(path.name)
            elif isinstance(node, ast.Import) and any(a.name == "edgewatch.agent.agent" for a in node.names):
                reaching_back.append(path.name)
    assert reaching_back == []


def test_every_agent_module_has_a_docstring_and_at_most_about_600_lines() -> None:
    sizes = {str(p.relative_to(AGENT)): len(p.read_text().splitlines()) for p in MODULES}
    assert all(n <= 620 for n in sizes.values()), sizes
    undocumented = [str(p.relative_to(AGENT)) for p in MODULES if ast.get_docstring(_tree(p)) is None]
    assert undocumented == []

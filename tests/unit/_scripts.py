"""Load one of the repository's scripts (bench/, hack/) as a module, for tests of its pure parts."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def load_script(relative: str, *, name: str) -> ModuleType:
    """The script at ``ROOT / relative`` imported as module ``name`` (registered in sys.modules, so
    its dataclasses resolve their own module)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / relative)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module

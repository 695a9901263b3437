"""Replacing a small state file in one step: write a sibling temporary file, then rename it over
the target, so a reader (or an agent restarted mid-write) sees the old content or the new, never
half of it. For the agent's state folder (group roster, known keys, the controller's beacon key).

Limits: no fsync (state that a crash may lose is re-read from the cloud); not for secrets (the
temporary file gets the default mode; ``edgewatch.core.identity`` writes its key file itself, 0600).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["replace_file"]


def replace_file(path: Path, data: str | bytes) -> None:
    """Make ``path`` hold ``data`` (text as UTF-8), creating its folder if needed.

    Raises:
        OSError: the folder or the file cannot be written.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    if isinstance(data, str):
        tmp.write_text(data)
    else:
        tmp.write_bytes(data)
    os.replace(tmp, path)

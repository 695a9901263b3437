"""Logging for every edgewatch process: structured lines on stderr, JSON (containers) or key=value
text (terminals), with the ``extra={...}`` fields of each record kept as keys.

Limits: configures the root logger of the process (call once, at start); quiets the HTTP client
libraries to WARNING.
"""

from __future__ import annotations

import logging

import structlog

__all__ = ["configure_logging"]


def configure_logging(*, level: str, json_logs: bool) -> None:
    """Send every log record to stderr as a JSON line (``json_logs``) or as key=value text.

    Args:
        level: the root level name (``"INFO"``, ``"debug"``, ...).
        json_logs: JSON lines (True) or human-readable text (False).

    Raises:
        ValueError: an unknown level name.
    """
    pre_chain: list[structlog.typing.Processor] = [
        structlog.processors.TimeStamper(fmt="iso"), structlog.stdlib.add_log_level, structlog.stdlib.ExtraAdder()]
    if json_logs:
        # a record's exc_info as the traceback's text under "exception" (JSONRenderer alone wrote the
        # tuple's repr: the type, the message and "<traceback object at ...>", never the stack)
        pre_chain.append(structlog.processors.format_exc_info)
        renderer: structlog.typing.Processor = structlog.processors.JSONRenderer()
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=False)
    formatter = structlog.stdlib.ProcessorFormatter(processor=renderer, foreign_pre_chain=pre_chain)
    handler = logging.StreamHandler()
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("httpx", "httpx2", "aiohttp.access", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)

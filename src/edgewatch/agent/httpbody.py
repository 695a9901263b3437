"""Reading an HTTP body whole, up to a limit: what the peer port and the peer exchange's client do
with every request and answer before they authenticate a byte of it (docs/security.md: read
bodies whole up to a limit, then refuse the oversized)."""

from __future__ import annotations

import aiohttp

__all__ = ["read_body"]


async def read_body(stream: aiohttp.StreamReader, limit: int) -> bytes:
    """The whole body, or its first ``limit + 1`` bytes if it is longer (the caller then refuses it
    as oversized). ``StreamReader.read(n)`` returns only what is buffered — part of a body sent in
    several TCP segments — so read until EOF or past the limit."""
    chunks: list[bytes] = []
    size = 0
    while size <= limit:
        chunk = await stream.read(limit + 1 - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)

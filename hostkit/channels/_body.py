"""Reading a request body under a byte limit and a deadline.

A declared ``Content-Length`` over the limit is refused before anything is
read; a body without one (chunked) is counted while it streams and refused
the moment it passes the limit, so an oversize body is never held in full.
"""

from __future__ import annotations

import anyio
from starlette.requests import Request

from hostkit.errors import ChannelRefused

__all__ = ["read_body"]

_DIGITS = frozenset("0123456789")


def _too_large(limit: int) -> ChannelRefused:
    return ChannelRefused(f"the body is over {limit} bytes", status=413, code="too_large")


async def read_body(request: Request, *, limit: int, timeout_s: float) -> bytes:
    """The whole body, or ``ChannelRefused`` (413 too large, 400 bad length, 408 too slow)."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared or len(declared) > 18 or not set(declared) <= _DIGITS:
            raise ChannelRefused(
                "Content-Length is not a byte count", status=400, code="bad_length"
            )
        if int(declared) > limit:
            raise _too_large(limit)
    body = bytearray()
    try:
        with anyio.fail_after(timeout_s):
            async for chunk in request.stream():
                body += chunk
                if len(body) > limit:
                    raise _too_large(limit)
    except TimeoutError:
        raise ChannelRefused(
            "the body did not arrive in time", status=408, code="slow_body"
        ) from None
    return bytes(body)

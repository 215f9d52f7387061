"""Reading a request body under a byte limit, a deadline and the app's shared budget.

A declared ``Content-Length`` over the limit is refused before anything is
read, and one sent with ``Transfer-Encoding`` too (two framings) is refused;
every body is counted while it streams and refused the moment it passes the
limit, so an oversize body is never held in full.

Some senders can only be told apart from an attacker once their body is
read (a signature covers the body), so many bodies may be read at once by
people holding no secret. ``BodyBudget`` bounds the bytes all of them hold
together, charged as they arrive: past it a request is answered 503 with
``Retry-After`` (platforms retry it), never taken into memory.
"""

from __future__ import annotations

import anyio
from starlette.requests import Request

from hostkit.errors import ChannelRefused

__all__ = ["BODY_BUDGET_BYTES", "BodyBudget", "BodyShare", "read_body"]

_DIGITS = frozenset("0123456789")

# The bytes of request bodies one app holds at once, across its channels: eight bodies at
# the largest ``max_body_bytes`` a channel may set, thousands of platform events.
BODY_BUDGET_BYTES = 64 * 1024 * 1024


class BodyBudget:
    """The bytes of request bodies held at once; a request takes its share and gives it back.

    Only the event loop's thread touches it (every request runs there), so
    taking and giving need no lock.
    """

    def __init__(self, total: int) -> None:
        self.total = total
        self.held = 0

    def share(self) -> BodyShare:
        return BodyShare(self)


class BodyShare:
    """One request's bytes of a ``BodyBudget``: taken while its body arrives, given back
    all at once by ``release`` when the request is answered."""

    def __init__(self, budget: BodyBudget) -> None:
        self._budget = budget
        self.taken = 0

    def take(self, size: int) -> None:
        """Take ``size`` more bytes, or 503 when the budget has not that much left."""
        budget = self._budget
        if budget.held + size > budget.total:
            raise ChannelRefused(
                "the server holds too many request bodies at once; retry later",
                status=503,
                code="busy",
            )
        budget.held += size
        self.taken += size

    def release(self) -> None:
        self._budget.held -= self.taken
        self.taken = 0


def _too_large(limit: int) -> ChannelRefused:
    return ChannelRefused(f"the body is over {limit} bytes", status=413, code="too_large")


async def read_body(request: Request, *, limit: int, timeout_s: float, share: BodyShare) -> bytes:
    """The whole body, or ``ChannelRefused`` (413 too large, 400 bad length, 408 too slow,
    503 over the app's budget). Its bytes stay taken from ``share`` until released.

    The budget is charged for the bytes as they arrive, never for a length only
    declared: a sender that promises a body and sends nothing holds nothing, and a
    body framed otherwise than its ``Content-Length`` says (chunked too) cannot hold
    more than it was charged for.
    """
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared or len(declared) > 18 or not set(declared) <= _DIGITS:
            raise ChannelRefused(
                "Content-Length is not a byte count", status=400, code="bad_length"
            )
        if "transfer-encoding" in request.headers:
            # Two framings (RFC 9112 6.3): which one a proxy and this server follow can
            # differ, and the length told is not what arrives.
            raise ChannelRefused(
                "Content-Length and Transfer-Encoding together", status=400, code="bad_length"
            )
        if int(declared) > limit:
            raise _too_large(limit)
    body = bytearray()
    try:
        with anyio.fail_after(timeout_s):
            async for chunk in request.stream():
                if len(body) + len(chunk) > limit:
                    raise _too_large(limit)
                share.take(len(chunk))
                body += chunk
    except TimeoutError:
        raise ChannelRefused(
            "the body did not arrive in time", status=408, code="slow_body"
        ) from None
    return bytes(body)

"""Reading a request body under a byte limit, a deadline and the app's shared budget.

A declared ``Content-Length`` over the limit is refused before anything is
read, and one sent with ``Transfer-Encoding`` too (two framings) is refused;
every body is counted while it streams and refused the moment it passes the
limit, so an oversize body is never held in full.

Some senders can only be told apart from an attacker once their body is
read (a signature covers the body), so many bodies may be read at once by
people holding no secret. ``BodyBudget`` bounds the bytes all of them hold
together, charged as they arrive. When a body needs more than is left, the
body that has been arriving the longest is shed (answered 503, its bytes
given back): a platform sends its few kilobytes at once, so only a sender
trickling bodies to hold the budget loses its turn, and it cannot starve the
others, on its own channel or any other. Only when no body is still arriving
(all are read and being accepted) is the newcomer answered 503 with
``Retry-After`` (platforms retry it), never taken into memory.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import anyio
from starlette.requests import Request

from hostkit.errors import ChannelRefused

__all__ = ["BODY_BUDGET_BYTES", "BodyBudget", "BodyShare", "read_body"]

_DIGITS = frozenset("0123456789")

# The bytes of request bodies one app holds at once, across its channels: eight bodies at
# the largest ``max_body_bytes`` a channel may set, thousands of platform events.
BODY_BUDGET_BYTES = 64 * 1024 * 1024
# Bodies arriving at once, each holding a connection: well under the listener's 512, so
# bodies trickled a byte at a time cannot hold every connection either.
MAX_ARRIVING = 128


class BodyBudget:
    """The bytes of request bodies held at once; a request takes its share and gives it back.

    Only the event loop's thread touches it (every request runs there), so
    taking and giving need no lock.
    """

    def __init__(self, total: int, *, max_arriving: int = MAX_ARRIVING) -> None:
        self.total = total
        self.max_arriving = max_arriving
        self.held = 0
        # Shares whose body is still arriving, the longest-arriving first.
        self.arriving: dict[BodyShare, None] = {}

    def share(self) -> BodyShare:
        return BodyShare(self)


class BodyShare:
    """One request's bytes of a ``BodyBudget``: taken while its body arrives, given back
    all at once by ``release`` when the request is answered (or at once when shed)."""

    def __init__(self, budget: BodyBudget) -> None:
        self._budget = budget
        self.taken = 0
        self.shed = False
        self._scope: anyio.CancelScope | None = None

    def take(self, size: int) -> None:
        """Take ``size`` more bytes, shedding the longest-arriving other bodies that hold
        some to make room; 503 when none is left to shed (or this one was shed itself)."""
        budget = self._budget
        if self.shed:  # its next chunk came in the same pass as the cancellation
            raise _busy()
        while budget.held + size > budget.total:
            victim = next(
                (share for share in budget.arriving if share is not self and share.taken),
                None,
            )
            if victim is None:
                raise _busy()
            victim._shed()
        budget.held += size
        self.taken += size

    @contextlib.contextmanager
    def arriving(self) -> Iterator[None]:
        """While the body arrives: in line to be shed (the longest-arriving first); at
        ``max_arriving`` bodies the longest-arriving one makes way for this one."""
        budget = self._budget
        while len(budget.arriving) >= budget.max_arriving:
            next(iter(budget.arriving))._shed()
        budget.arriving[self] = None
        try:
            with anyio.CancelScope() as self._scope:
                yield
        finally:
            self._scope = None
            self._budget.arriving.pop(self, None)

    def _shed(self) -> None:
        self.shed = True
        self.release()
        if self._scope is not None:
            self._scope.cancel()

    def release(self) -> None:
        self._budget.held -= self.taken
        self.taken = 0
        self._budget.arriving.pop(self, None)


def _busy() -> ChannelRefused:
    return ChannelRefused(
        "the server holds too many request bodies at once; retry later", status=503, code="busy"
    )


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
        with anyio.fail_after(timeout_s), share.arriving():
            async for chunk in request.stream():
                if len(body) + len(chunk) > limit:
                    raise _too_large(limit)
                share.take(len(chunk))
                body += chunk
    except TimeoutError:
        raise ChannelRefused(
            "the body did not arrive in time", status=408, code="slow_body"
        ) from None
    if share.shed:
        raise ChannelRefused(
            "the body arrived too slowly while others waited for the server's room; retry later",
            status=503,
            code="busy",
        )
    return bytes(body)

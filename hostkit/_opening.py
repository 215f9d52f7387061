"""One idiom for opening a resource: ``async with X.open(...) as x`` or ``x = await X.open(...)``.

Every openable hostkit resource (the Host, the store) has a classmethod
``open`` that returns an ``Opening``: awaiting it gives the open resource,
which the caller closes with ``await x.aclose()`` (notebooks, long-lived
services); entering it with ``async with`` closes the resource on exit, also
when the block is cancelled.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from types import TracebackType
from typing import Generic, TypeVar

import anyio
from anyio.abc import AsyncResource

__all__ = ["Opening"]

R = TypeVar("R", bound=AsyncResource)


class Opening(Generic[R]):
    """An open in progress: await it for the resource, or use it as an async context manager."""

    __slots__ = ("_open", "_resource")

    def __init__(self, open_: Callable[[], Awaitable[R]]) -> None:
        self._open = open_
        self._resource: R | None = None

    def __await__(self) -> Generator[object, None, R]:
        return self._open().__await__()

    async def __aenter__(self) -> R:
        if self._resource is not None:
            raise RuntimeError("this Opening was already entered; call open() again")
        self._resource = await self._open()
        return self._resource

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        resource, self._resource = self._resource, None
        if resource is not None:
            with anyio.CancelScope(shield=True):
                await resource.aclose()

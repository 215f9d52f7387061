"""Each tool of a ``tools/list`` page judged on its own, before the SDK parses the page.

The ``mcp`` SDK checks a listing page against the negotiated protocol's
schema as one piece (pydantic, inside ``ClientSession.send_request``, before
any result type a caller could pass): one tool whose input schema is not an
object schema, or whose entry is otherwise malformed, fails the whole page,
and with it every other tool of the server. A name and schemas the server
chose at run time must not take its other tools down, so ``ToolListings``
sits on the transport's streams, which the Host supplies: it notes each
``tools/list`` request the session sends and takes out of its answer each
entry the Host will not use (``tool_problem``, or the protocol's own schema
applied to that entry alone), keeping its name and reason for ``list_tools``.
A page malformed as a page (no tool array, more than ``MAX_TOOLS`` entries,
page fields the protocol refuses) passes untouched and fails the listing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCRequest, JSONRPCResponse, RequestId
from mcp_types.methods import validate_server_result
from pydantic import ValidationError

from hostkit.builtins.mcp._errors import MAX_TOOLS
from hostkit.builtins.mcp._render import tool_problem
from hostkit.errors import bounded

if TYPE_CHECKING:  # the SDK's private module: its names for types only, never at run time
    from mcp.client._transport import ReadStream, TransportStreams, WriteStream

__all__ = ["ToolListings", "entry_problem"]

_METHOD = "tools/list"
# The page fields every protocol revision accepts, around one entry tried alone.
_SHELL = {"resultType": "complete", "ttlMs": 0, "cacheScope": "private"}

Item = SessionMessage | Exception


class ToolListings:
    """The tool entries the last listing pages took out, by name, with why.

    ``version`` gives the negotiated protocol (None before the handshake: a
    page then passes untouched). ``take`` hands over what was refused since
    it was last called; the connection lists one page at a time.
    """

    def __init__(self, version: Callable[[], str | None]) -> None:
        self._version = version
        self._asked: set[RequestId] = set()
        self._refused: dict[str, str] = {}

    def take(self) -> dict[str, str]:
        """The refused entries' names (``""`` for one with none) and reasons, since the last
        ``take``."""
        refused, self._refused = self._refused, {}
        return refused

    @asynccontextmanager
    async def streams(
        self, transport: AbstractAsyncContextManager[TransportStreams]
    ) -> AsyncIterator[TransportStreams]:
        """``transport``'s streams, with each listing page's unusable entries taken out."""
        async with transport as (read, write):
            yield _Read(read, self._answered), _Write(write, self._asking)

    def _asking(self, item: SessionMessage) -> None:
        message = item.message
        if isinstance(message, JSONRPCRequest) and message.method == _METHOD:
            self._asked.add(message.id)

    def _answered(self, item: Item) -> Item:
        if not isinstance(item, SessionMessage):
            return item
        message = item.message
        if not isinstance(message, JSONRPCResponse) or message.id not in self._asked:
            return item
        self._asked.discard(message.id)
        tools = message.result.get("tools")
        version = self._version()
        if not isinstance(tools, list) or len(tools) > MAX_TOOLS or version is None:
            return item
        kept: list[Any] = []
        for entry in tools:
            problem = entry_problem(entry, version)
            if problem is None:
                kept.append(entry)
            else:
                self._refused.setdefault(_name_of(entry), problem)
        if len(kept) == len(tools):
            return item
        answer = message.model_copy(update={"result": {**message.result, "tools": kept}})
        return dataclasses.replace(item, message=answer)


def entry_problem(entry: Any, version: str) -> str | None:
    """Why the Host will not use one listed tool entry (the raw JSON), or None.

    The Host's own checks first (``tool_problem``: they name the reason), then
    protocol ``version``'s schema for a tool, applied to this entry alone. The
    reason names where, never a value.
    """
    name = _name_of(entry)
    if not name:
        return "it has no name"
    problem = tool_problem(name, entry.get("inputSchema"), entry.get("outputSchema"))
    if problem is not None:
        return problem
    try:
        validate_server_result(_METHOD, version, {**_SHELL, "tools": [entry]})
    except ValidationError as exc:
        return f"its entry does not fit protocol {version} at {_where(exc)}"
    except (KeyError, ValueError):
        return None  # a revision the SDK has no schema for: it judges the page itself
    return None


def _name_of(entry: Any) -> str:
    name = entry.get("name") if isinstance(entry, dict) else None
    return name if isinstance(name, str) else ""


def _where(exc: ValidationError) -> str:
    """The first problem's place in the entry (``annotations.readOnlyHint``), not its value."""
    errors = exc.errors(include_url=False, include_input=False, include_context=False)
    loc = errors[0]["loc"][2:] if errors else ()
    return bounded(".".join(str(part) for part in loc) or "its root", 80)


class _Read:
    """The transport's read stream, each item passed through ``seen``."""

    def __init__(self, inner: ReadStream[Item], seen: Callable[[Item], Item]) -> None:
        self._inner = inner
        self._seen = seen

    async def receive(self) -> Item:
        return self._seen(await self._inner.receive())

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Item:
        return self._seen(await self._inner.__anext__())

    async def __aenter__(self) -> Self:
        await self._inner.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> bool | None:
        return await self._inner.__aexit__(exc_type, exc_val, exc_tb)


class _Write:
    """The transport's write stream, each message shown to ``sending`` first."""

    def __init__(
        self, inner: WriteStream[SessionMessage], sending: Callable[[SessionMessage], None]
    ) -> None:
        self._inner = inner
        self._sending = sending

    async def send(self, item: SessionMessage, /) -> None:
        self._sending(item)
        await self._inner.send(item)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> Self:
        await self._inner.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> bool | None:
        return await self._inner.__aexit__(exc_type, exc_val, exc_tb)

"""Each tool of a ``tools/list`` page judged on its own, before the SDK parses the page.

The ``mcp`` SDK checks a listing page against the negotiated protocol's
schema as one piece (pydantic, inside ``ClientSession.send_request``, before
any result type a caller could pass): one tool whose input schema is not an
object schema, or whose entry is otherwise malformed, fails the whole page,
and with it every other tool of the server. A name and schemas the server
chose at run time must not take its other tools down, so ``ToolListings``
sits on the transport's streams, which the Host supplies: it notes each
``tools/list`` request the session sends and takes out of its answer each
entry the Host will not use (``entry_problem``: ``tool_problem``, then every
check the SDK applies to a page, applied to that entry alone), handing its
name and reason to the listing that sent the request (``Listing``).
A page malformed as a page (no tool array, more than ``MAX_TOOLS`` entries,
page fields the protocol refuses) passes untouched and fails the listing.

The server chooses how costly a page is to judge, so judging it is bounded
and never on the event loop: a page is judged on a worker thread, each entry
is validated only up to its first error (pydantic would otherwise build one
error per bad item: a 4 MiB page of them held the loop for seconds), and the
connection fails a listing that takes out more than ``MAX_TOOLS`` entries.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

import anyio
from mcp.shared.dispatcher import coerce_request_id
from mcp.shared.inbound import find_invalid_x_mcp_header
from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCError, JSONRPCRequest, JSONRPCResponse, ListToolsResult, RequestId
from mcp_types.methods import SERVER_RESULTS
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import TypeAdapter, ValidationError
from pydantic_core import SchemaValidator

from hostkit.builtins.mcp._errors import MAX_TOOLS
from hostkit.builtins.mcp._render import tool_problem
from hostkit.errors import bounded

if TYPE_CHECKING:  # the SDK's private module: its names for types only, never at run time
    from mcp.client._transport import ReadStream, TransportStreams, WriteStream

__all__ = ["Listing", "ToolListings", "entry_problem", "judge_page"]

_METHOD = "tools/list"
# The page fields every protocol revision accepts, around one entry tried alone.
_SHELL = {"resultType": "complete", "ttlMs": 0, "cacheScope": "private"}
# How many tools/list requests are remembered awaiting their answer: a listing sends
# at most 16; the ids of one that ended are forgotten when it ends.
_MAX_ASKED = 64
# The core-schema types that can stop at their first bad item (``fail_fast``).
_CONTAINERS = frozenset({"list", "tuple", "set", "frozenset", "deque", "dict"})
# Parts of a core schema that are no validation schema of their own.
_NOT_VALIDATION = frozenset({"metadata", "serialization"})

Item = SessionMessage | Exception


class Listing:
    """One ``list_tools``: the entries its own requests' answers had taken out.

    ``take`` hands over the refused names (``""`` for an entry with none) and
    reasons since it was last called; ``refused_entries`` counts every entry
    taken out, repeats included (the connection's budget).
    """

    def __init__(self) -> None:
        self.refused_entries = 0
        self.ended = False
        self._refused: dict[str, str] = {}

    def take(self) -> dict[str, str]:
        """What was refused since the last ``take``; the first reason for a repeated name."""
        refused, self._refused = self._refused, {}
        return refused

    def add(self, refused: list[tuple[str, str]]) -> None:
        """Credit one of this listing's pages' refused entries (name, reason) to it."""
        self.refused_entries += len(refused)
        for name, reason in refused:
            self._refused.setdefault(name, reason)


class ToolListings:
    """Filters each ``tools/list`` answer, and tells each listing what its pages lost.

    ``version`` gives the negotiated protocol (None before the handshake: a
    page then passes untouched). A request is known by its id as the SDK
    matches answers (``coerce_request_id``: a server may echo ``7`` as
    ``"7"``); an answer is credited to the listing that sent the request
    while that listing runs, never to a later one: a late answer to an
    abandoned listing is not judged at all (the SDK drops it).
    """

    def __init__(self, version: Callable[[], str | None]) -> None:
        self._version = version
        # Each tools/list request awaiting its answer, and the listing that sent it.
        self._asked: dict[RequestId, Listing | None] = {}
        self._current: Listing | None = None

    @contextmanager
    def listing(self) -> Iterator[Listing]:
        """A listing: the requests sent until it ends are its own."""
        listing = Listing()
        self._current = listing
        try:
            yield listing
        finally:
            listing.ended = True
            if self._current is listing:
                self._current = None
            for key in [key for key, sender in self._asked.items() if sender is listing]:
                del self._asked[key]

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
            self._asked[coerce_request_id(message.id)] = self._current
            while len(self._asked) > _MAX_ASKED:
                del self._asked[next(iter(self._asked))]

    async def _answered(self, item: Item) -> Item:
        if not isinstance(item, SessionMessage):
            return item
        message = item.message
        if not isinstance(message, JSONRPCResponse | JSONRPCError) or message.id is None:
            return item
        key = coerce_request_id(message.id)
        if key not in self._asked:
            return item  # not a listing's, or one that ended: the SDK drops a late answer
        listing = self._asked.pop(key)
        if isinstance(message, JSONRPCError):
            return item
        tools = message.result.get("tools")
        version = self._version()
        if not isinstance(tools, list) or len(tools) > MAX_TOOLS or version is None:
            return item
        kept, refused = await anyio.to_thread.run_sync(
            judge_page, tools, version, abandon_on_cancel=True
        )
        if listing is not None and not listing.ended:
            listing.add(refused)
        if not refused:
            return item
        answer = message.model_copy(update={"result": {**message.result, "tools": kept}})
        return dataclasses.replace(item, message=answer)


def judge_page(tools: list[Any], version: str) -> tuple[list[Any], list[tuple[str, str]]]:
    """The entries the Host keeps, and each other's name and reason (blocking: a worker
    thread; bounded by the page's size)."""
    kept: list[Any] = []
    refused: list[tuple[str, str]] = []
    for entry in tools:
        problem = entry_problem(entry, version)
        if problem is None:
            kept.append(entry)
        else:
            refused.append((_name_of(entry), problem))
    return kept, refused


def entry_problem(entry: Any, version: str) -> str | None:
    """Why the Host will not use one listed tool entry (the raw JSON), or None.

    The Host's own checks first (``tool_problem``: they name the reason), then
    each check the SDK applies to a page, to this entry alone, so that no
    entry kept can fail its page: protocol ``version``'s schema, the SDK's
    version-free ``ListToolsResult`` (``ClientSession.send_request``), and on
    2026-07-28 the ``x-mcp-header`` rules (the SDK would drop the tool
    unnamed). Each schema stops at the entry's first error, which the reason
    names by place, never by value.
    """
    name = _name_of(entry)
    if not name:
        return "it has no name"
    problem = tool_problem(name, entry.get("inputSchema"), entry.get("outputSchema"))
    if problem is not None:
        return problem
    surface = SERVER_RESULTS.get((_METHOD, version))
    if surface is not None:
        where = _misfit(surface, {**_SHELL, "tools": [entry]})
        if where is not None:
            return f"its entry does not fit protocol {version} at {where}"
    where = _misfit(ListToolsResult, {"tools": [entry]})
    if where is not None:
        return f"its entry does not fit the mcp SDK's tool type at {where}"
    if version in MODERN_PROTOCOL_VERSIONS and find_invalid_x_mcp_header(entry["inputSchema"]):
        return f"its input schema has an x-mcp-header annotation protocol {version} refuses"
    return None


def _misfit(target: Any, page: dict[str, Any]) -> str | None:
    """Where in its entry ``page`` first fails ``target``, or None when it fits."""
    try:
        _first_error_validator(target).validate_python(page, by_name=False)
    except ValidationError as exc:
        return _where(exc)
    return None


@functools.cache
def _first_error_validator(target: Any) -> SchemaValidator:
    """``target``'s validator, with every container stopping at its first bad item.

    It accepts and refuses what the SDK's own does (``fail_fast`` changes only
    how many errors are collected), and its cost is bounded by the input's
    size: the SDK's builds an error for each bad item. Built from the schema,
    not the models' prebuilt validators, which collect every error.
    """
    schema = copy.deepcopy(TypeAdapter(target).core_schema)
    _stop_at_first_error(schema)
    return SchemaValidator(schema, _use_prebuilt=False)


def _stop_at_first_error(node: Any) -> None:
    if isinstance(node, dict):
        kind = node.get("type")
        if isinstance(kind, str) and kind in _CONTAINERS:
            node["fail_fast"] = True
        for key, value in node.items():
            if key not in _NOT_VALIDATION:
                _stop_at_first_error(value)
    elif isinstance(node, list):
        for value in node:
            _stop_at_first_error(value)


def _name_of(entry: Any) -> str:
    name = entry.get("name") if isinstance(entry, dict) else None
    return name if isinstance(name, str) else ""


def _where(exc: ValidationError) -> str:
    """The first problem's place in the entry (``annotations.readOnlyHint``), not its value."""
    errors = exc.errors(include_url=False, include_input=False, include_context=False)
    loc = errors[0]["loc"][2:] if errors else ()
    return bounded(".".join(str(part) for part in loc) or "its root", 80)


class _Wrapped:
    """A transport stream's closing and context management, passed to the stream wrapped."""

    _inner: Any

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
        result: bool | None = await self._inner.__aexit__(exc_type, exc_val, exc_tb)
        return result


class _Read(_Wrapped):
    """The transport's read stream, each item passed through ``seen``."""

    def __init__(self, inner: ReadStream[Item], seen: Callable[[Item], Awaitable[Item]]) -> None:
        self._inner = inner
        self._seen = seen

    async def receive(self) -> Item:
        return await self._seen(await self._inner.receive())

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Item:
        return await self._seen(await self._inner.__anext__())


class _Write(_Wrapped):
    """The transport's write stream, each message shown to ``sending`` first."""

    def __init__(
        self, inner: WriteStream[SessionMessage], sending: Callable[[SessionMessage], None]
    ) -> None:
        self._inner = inner
        self._sending = sending

    async def send(self, item: SessionMessage, /) -> None:
        self._sending(item)
        await self._inner.send(item)

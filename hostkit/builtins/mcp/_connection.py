"""One live MCP session: the SDK ``Client`` held open by a task of its own.

The pool keeps a connection for a whole session, across turns and tasks,
while the SDK's client is an async context manager with task groups inside,
which must be entered and left by one task. So the client lives in an owner
task (started on the running loop, as ``terminal.run``'s background runs
are) that enters it, reports ready and waits to be told to close; calls from
any task go through it. ``aclose`` (idempotent, shielded, bounded) stops the
owner, whose exit stops the transport (for stdio: the whole process tree).

Outcomes of a call: ``succeeded`` with the rendered result; ``failed`` when
the server reported an error (``isError`` or a JSON-RPC error), when the
connection was already closed (nothing was sent), when a message passed
the size bound, when the result does not fit the tool's output schema (the
Host's check, ``_render``; the connection is kept) or the tool was listed
refused, its schema or entry failing the Host's checks (nothing is sent;
``list_tools`` marks such a tool refused, so the catalog never offers it and
only a direct caller meets this);
``indeterminate`` when the connection ended while the call ran (the server
may have acted). A cancelled call (the runtime's deadline)
propagates; the SDK sends the server a cancellation and the session stays
usable, though the pool closes it after a timeout.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

import anyio
from mcp import Client
from mcp.client import InputRequiredRoundsExceededError
from mcp.client._transport import TransportStreams
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, Implementation
from pydantic import ValidationError

from hostkit.builtins.mcp._errors import (
    MAX_MCP_MESSAGE_BYTES,
    MAX_TOOLS,
    McpConnectFailed,
    McpProtocolError,
)
from hostkit.builtins.mcp._listing import Listing, ToolListings
from hostkit.builtins.mcp._render import (
    OutputSchema,
    check_outputs,
    refused_spec,
    render_result,
    tool_spec,
    without_sdk_validation,
)
from hostkit.effects import McpServerDeclaration, McpToolSpec, ToolOutcome
from hostkit.errors import HostkitError, bounded

__all__ = ["ClientConnection", "Link"]

_CLOSE_TIMEOUT_S = 10.0
_MAX_PAGES = 16
_REASON_CHARS = 500
# An outcome with nothing to show: None would render as the JSON text "null" after the reason.
_NO_OUTPUT = ""
_CLIENT_INFO = Implementation(name="hostkit", version="0.1")
_OVERSIZED = f"a message from the server exceeded {MAX_MCP_MESSAGE_BYTES // (1024 * 1024)} MiB"
# httpx2's SSE decoder: "Server-sent event exceeded the <n> byte limit."
_OVERSIZED_EVENT = f"exceeded the {MAX_MCP_MESSAGE_BYTES} byte limit"


class Link(Protocol):
    """A transport the connection runs on, and what it knows about its own state."""

    transport: str

    @property
    def ended(self) -> bool: ...

    @property
    def broken(self) -> str | None: ...

    def diagnostics(self) -> str: ...

    def closed_by(self, message: str) -> bool:
        """Whether a ``CONNECTION_CLOSED`` error with ``message`` means this link ended.

        -32000 is also the first JSON-RPC "server error" code, which servers send
        for their own errors: those fail the call and keep the connection.
        """
        ...

    def streams(self) -> AbstractAsyncContextManager[TransportStreams]: ...


class ClientConnection:
    """A live, initialized client session with one server (``hostkit.effects.McpConnection``)."""

    def __init__(self, declaration: McpServerDeclaration, link: Link) -> None:
        self._declaration = declaration
        self._link = link
        self._client: Client | None = None
        self._ready = anyio.Event()
        self._stop = anyio.Event()
        self._done = anyio.Event()
        self._scope = anyio.CancelScope()
        self._failure: BaseException | None = None
        self._lost = False
        # Each listed tool's output schema as the Host applies it (the last listing's).
        self._outputs: Mapping[str, OutputSchema] = {}
        # The last listing's tools the Host will not call, and why.
        self._refused: Mapping[str, str] = {}
        self._listings = ToolListings(self._protocol)
        self._listing = anyio.Lock()
        self._task: asyncio.Task[None] | None = None

    @classmethod
    async def open(cls, declaration: McpServerDeclaration, link: Link) -> ClientConnection:
        """Start the transport and initialize the session; close everything on any failure.

        Raises ``McpConnectFailed`` (with the server's bounded diagnostics) when it
        did not come up. A cancelled open (the caller's deadline) stops what started.
        """
        connection = cls(declaration, link)
        connection._task = asyncio.get_running_loop().create_task(
            connection._own(), name=f"mcp {declaration.name}"
        )
        try:
            await connection._ready.wait()
        except BaseException:
            await connection.aclose()
            raise
        if connection._client is None:
            await connection.aclose()
            raise McpConnectFailed(connection._why_not_started())
        return connection

    async def _own(self) -> None:
        try:
            with self._scope:
                async with Client(
                    self._listings.streams(self._link.streams()),
                    cache=None,
                    client_info=_CLIENT_INFO,
                ) as client:
                    without_sdk_validation(client.session)
                    self._client = client
                    self._ready.set()
                    await self._stop.wait()
        except Exception as exc:  # reported by open() or seen as alive=False; never unretrieved
            self._failure = exc
        finally:
            self._done.set()
            self._ready.set()

    def _protocol(self) -> str | None:
        return None if self._client is None else self._client.session.protocol_version

    def _why_not_started(self) -> str:
        name = self._declaration.name
        reason = self._link.broken or _describe(self._failure)
        return bounded(
            f"MCP server {name!r} did not start{self._link.diagnostics()} ({reason})", 1000
        )

    @property
    def alive(self) -> bool:
        return (
            self._client is not None
            and not self._stop.is_set()
            and not self._done.is_set()
            and not self._lost
            and not self._link.ended
            and self._link.broken is None
        )

    async def list_tools(self) -> Sequence[McpToolSpec]:
        """Every listed tool (at most ``MAX_TOOLS``, over at most 16 pages), bounded and checked.

        A tool the Host will not use carries the reason (``McpToolSpec.refusal``):
        an entry the listing filter took out of its page (``_listing``: no
        name, a name too long, an input schema that is no object schema or too
        large, an entry the protocol's schema or the SDK's tool type refuses)
        or one whose output schema fails the Host's checks. The catalog leaves
        it out and names it; the server's other tools are listed as usual. Only
        a page malformed as a page, too many tools or pages, or more than
        ``MAX_TOOLS`` entries taken out in all fail the listing
        (``McpProtocolError``). Only this listing's own requests' answers name
        its refused tools.
        """
        async with self._listing:
            with self._listings.listing() as listing:
                return await self._list_tools(listing)

    async def _list_tools(self, listing: Listing) -> Sequence[McpToolSpec]:
        client = self._live()
        specs: list[McpToolSpec] = []
        refused: dict[str, str] = {}
        outputs: dict[str, Any] = {}
        seen: set[str] = set()
        cursor: str | None = None

        def add(spec: McpToolSpec, name: str) -> None:
            seen.add(name)
            specs.append(spec)
            if spec.refusal is not None:
                refused[name] = spec.refusal
            if len(specs) > MAX_TOOLS:
                server = self._declaration.name
                raise McpProtocolError(f"MCP server {server!r} lists more than {MAX_TOOLS} tools")

        try:
            for _ in range(_MAX_PAGES):
                page = await client.list_tools(cursor=cursor)
                if listing.refused_entries > MAX_TOOLS:
                    # Judging each entry costs work the server chose: a budget, as for tools.
                    raise McpProtocolError(
                        f"MCP server {self._declaration.name!r} lists more than {MAX_TOOLS} "
                        "tool entries the Host cannot use"
                    )
                for tool in page.tools:
                    if tool.name not in seen:
                        add(tool_spec(tool), tool.name)
                        if tool.output_schema is not None and tool.name not in refused:
                            outputs[tool.name] = tool.output_schema
                for name, reason in listing.take().items():
                    if name not in seen:
                        add(refused_spec(name, reason), name)
                cursor = page.next_cursor
                if cursor is None:
                    self._outputs = await anyio.to_thread.run_sync(
                        check_outputs, outputs, abandon_on_cancel=True
                    )
                    self._refused = refused
                    return tuple(_with_refusal(spec, self._outputs) for spec in specs)
        except MCPError as exc:
            self._lost = self._lost or (
                exc.code == CONNECTION_CLOSED and self._link.closed_by(exc.message)
            )
            raise McpProtocolError(self._listing_failed(exc)) from exc
        except ValidationError as exc:
            raise McpProtocolError(
                f"MCP server {self._declaration.name!r} sent a malformed tool list"
            ) from exc
        raise McpProtocolError(
            f"MCP server {self._declaration.name!r} paginates its tools past {_MAX_PAGES} pages"
        )

    def _listing_failed(self, exc: MCPError) -> str:
        name = self._declaration.name
        if self._link.broken is not None:
            return f"MCP server {name!r}: {self._link.broken}"
        return bounded(f"MCP server {name!r} could not list its tools: {exc.message}", 300)

    async def call_tool(self, name: str, arguments: Mapping[str, Any]) -> ToolOutcome:
        audit = {"server": self._declaration.name, "tool": name, "transport": self._link.transport}
        server = self._declaration.name
        client = self._client
        if client is None or not self.alive:
            return ToolOutcome(
                "failed", _NO_OUTPUT, f"the connection to MCP server {server!r} is closed", audit
            )
        output_schema = self._outputs.get(name)
        refusal = self._refused.get(name)
        if refusal is None and output_schema is not None:
            refusal = output_schema.refusal
        if refusal is not None:
            reason = f"{server}: tool {bounded(name, 64)!r} was not called: {refusal}"
            return ToolOutcome("failed", _NO_OUTPUT, bounded(reason, _REASON_CHARS), audit)
        try:
            result = await client.call_tool(name, dict(arguments))
        except MCPError as exc:
            if self._link.broken is not None:
                self._lost = True
                return ToolOutcome("failed", _NO_OUTPUT, f"{server}: {self._link.broken}", audit)
            if exc.code == CONNECTION_CLOSED and _OVERSIZED_EVENT in exc.message:
                # The SDK's own SSE bound (set to the same limit) ended the stream.
                self._lost = True
                return ToolOutcome("failed", _NO_OUTPUT, f"{server}: {_OVERSIZED}", audit)
            if exc.code == CONNECTION_CLOSED and self._link.closed_by(exc.message):
                return self._indeterminate(audit)
            return ToolOutcome(
                "failed",
                _NO_OUTPUT,
                bounded(f"{server} refused the call: {exc.message}", _REASON_CHARS),
                audit,
            )
        except ValidationError:
            return ToolOutcome("failed", _NO_OUTPUT, f"{server} returned a malformed result", audit)
        except InputRequiredRoundsExceededError:
            # A 2026-07-28 server's input_required results, past the SDK's rounds:
            # this call's failure, not the connection's.
            reason = f"{server} kept asking for input the Host does not give"
            return ToolOutcome("failed", _NO_OUTPUT, reason, audit)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            return self._indeterminate(audit)
        if output_schema is not None and not result.is_error:
            # Off the loop: the result is up to 4 MiB, the schema up to 2,000 subschemas.
            mismatch = await anyio.to_thread.run_sync(
                output_schema.mismatch, result, abandon_on_cancel=True
            )
            if mismatch is not None:
                reason = (
                    f"{server} returned a result that does not fit the output schema of {name!r}"
                )
                reason = bounded(f"{reason}: {mismatch}", _REASON_CHARS)
                return ToolOutcome("failed", _NO_OUTPUT, reason, audit)
        output, text = render_result(result)
        if result.is_error:
            reason = bounded(text or "the tool reported an error", _REASON_CHARS)
            return ToolOutcome("failed", output, reason, audit)
        return ToolOutcome("succeeded", output, None, audit)

    def _indeterminate(self, audit: Mapping[str, Any]) -> ToolOutcome:
        self._lost = True
        server = self._declaration.name
        detail = self._link.diagnostics() if self._link.transport == "stdio" else ""
        return ToolOutcome(
            "indeterminate",
            _NO_OUTPUT,
            bounded(
                f"the connection to MCP server {server!r} ended while the call ran{detail}",
                _REASON_CHARS,
            ),
            dict(audit),
        )

    def _live(self) -> Client:
        if self._client is None or not self.alive:
            raise McpConnectFailed(
                f"the connection to MCP server {self._declaration.name!r} is closed"
            )
        return self._client

    async def aclose(self) -> None:
        """Stop the owner task and with it the transport; idempotent, shielded, bounded."""
        self._stop.set()
        if not self._ready.is_set() or self._client is None:
            self._scope.cancel()
        with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_TIMEOUT_S) as waited:
            await self._done.wait()
        if waited.cancelled_caught:
            # A handshake stuck past every bound: cancel it outright.
            self._scope.cancel()
            with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_TIMEOUT_S):
                await self._done.wait()


def _with_refusal(spec: McpToolSpec, outputs: Mapping[str, OutputSchema]) -> McpToolSpec:
    output = outputs.get(spec.name)
    if output is None or output.refusal is None:
        return spec
    return dataclasses.replace(spec, refusal=output.refusal)


def _describe(exc: BaseException | None) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if exc is None:
        return "the session ended"
    if isinstance(exc, HostkitError):
        return exc.message
    if isinstance(exc, MCPError):
        return exc.message
    return f"{type(exc).__name__}: {exc}"

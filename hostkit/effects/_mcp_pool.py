"""Session-scoped MCP connections: reuse, eviction, a discovery window and failure backoff.

One ``McpConnections`` per Host, shared by its config generations, because a
connection outlives the turn (a stdio server takes seconds to start) and the
generation (a reload that leaves a declaration unchanged keeps it). A
connection belongs to one session and one server and is reused only while
its declaration digest and the authority it was approved under are
unchanged and its transport is alive; otherwise it is evicted (closed)
before anything else happens. Discovery (connect, initialize, one
``list_tools``) runs through one runtime-wide window of four servers and is
bounded by the declaration's ``connect_timeout_s``. A failure is remembered
per declaration for 30 seconds: turns in that time get the cached diagnostic
instead of a new attempt, while healthy peers stay connected.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio

from hostkit.effects._authored import ToolContext
from hostkit.effects._catalog import provider_name
from hostkit.effects._mcp import McpConnection, McpServer, McpServerDeclaration, McpToolSpec
from hostkit.effects._mcp_names import mcp_effect_name
from hostkit.effects._redaction import Redactor
from hostkit.effects._schema import SchemaTool, schema_problem, schema_refusal
from hostkit.errors import InvalidValue, bounded, unbounded_message
from hostkit.types import McpServerState, McpServerStatus, McpToolRow, is_count, is_seconds

__all__ = [
    "DISCOVERY_WINDOW",
    "FAILURE_TTL_S",
    "McpConnections",
    "McpDiscovery",
    "McpTool",
    "authority_of",
]

_log = logging.getLogger(__name__)

DISCOVERY_WINDOW = 4
FAILURE_TTL_S = 30.0
IDLE_TTL_S = 900.0
MAX_CONNECTIONS = 64
MAX_TRACKED_CONVERSATIONS = 10_000
MAX_TOOLS_PER_SERVER = 128
CLOSE_TIMEOUT_S = 10.0
_MAX_DETAIL = 300

StatusSink = Callable[[McpServerStatus], Awaitable[None]]


class McpTool(SchemaTool):
    """One discovered MCP tool, bound to the connection that listed it.

    The call goes to that connection's server under the server's own name for
    the tool; there is no global tool-name index. A call that does not end
    normally (the runtime's deadline, a cancelled turn, a broken transport)
    marks the connection stale, so the next turn of the session starts a
    fresh one instead of reusing a session with a request still in flight.
    Calls in flight are counted: idle eviction skips the connection, and one
    retired meanwhile (a configuration apply) is closed when the last ends.
    The declaration's ``secret_values`` (its env values, and credentials on its
    command line or in its URL) are masked in every view of the tool's results,
    as a held secret is.
    """

    def __init__(
        self,
        effect: str,
        spec: McpToolSpec,
        server: McpServerDeclaration,
        connection: McpConnection,
        live: _Live,
        *,
        approval_warning: str | None,
    ) -> None:
        super().__init__(
            effect,
            self._call,
            description=spec.description or spec.name,
            parameters=spec.input_schema,
            timeout_s=server.call_timeout_s,
            approval_warning=approval_warning,
        )
        self.server = server.name
        self.mcp_name = spec.name
        self.secret_values = server.secret_values()
        # What offering it costs the model's window, in characters (its name, description
        # and schema as sent): what the catalog's share of the window is counted in.
        self.catalog_chars = (
            len(effect) + len(self.description) + len(json.dumps(spec.input_schema, default=str))
        )
        self._connection = connection
        self._live = live

    async def _call(self, context: ToolContext, **arguments: Any) -> Any:
        live = self._live
        ended = False
        live.in_flight += 1
        try:
            outcome = await self._connection.call_tool(self.mcp_name, arguments)
            ended = True
            return outcome
        finally:
            live.in_flight -= 1
            live.last_used = live.clock()
            if not ended or not self._connection.alive:
                live.stale = True
            if live.retired and not live.busy:
                await _close(self._connection)


@dataclass(eq=False, slots=True)
class _Live:
    """One connection of one session to one server, and what it was made under.

    ``binding`` is the declaration digest with the connector's identity (the
    agent's sandbox, workspace and URL policy): either changing makes a new
    connection. ``retired`` connections left the pool with calls in flight.
    """

    agent: str
    session_id: str
    digest: str
    binding: str
    authority: str
    connection: McpConnection
    view: Mapping[str, Any]
    clock: Callable[[], float]
    tools: tuple[McpTool, ...] = ()
    # The tools it listed that are not offered, and why (the discovery's detail).
    left_out: str = ""
    last_used: float = 0.0
    stale: bool = False
    in_flight: int = 0
    # Catalogs of turns that were offered this connection's tools and are not closed yet.
    holders: int = 0
    retired: bool = False

    @property
    def busy(self) -> bool:
        """A turn holds it (prepared, maybe asking an approver) or a call is in flight."""
        return self.in_flight > 0 or self.holders > 0


@dataclass(frozen=True, slots=True)
class McpDiscovery:
    """What one declared server gives one turn: its tools, or why it gives none."""

    server: str
    state: McpServerState
    tools: tuple[McpTool, ...] = ()
    detail: str = ""
    failing_until: float | None = None


@dataclass(slots=True)
class _Failure:
    detail: str
    until: float  # monotonic
    until_wall: float


class McpConnections:
    """The Host's MCP connections, keyed by (session, server).

    ``clock`` (monotonic) and ``wall_clock`` are injectable so the failure
    TTL and idle eviction can be tested without sleeping. ``status`` receives
    each change of a server's operator-visible state (the Host writes it to
    the store for ``hostkit mcp list``). At most ``max_connections`` live at
    once: the least recently used idle one makes room for a new one.
    """

    def __init__(
        self,
        *,
        window: int = DISCOVERY_WINDOW,
        failure_ttl_s: float = FAILURE_TTL_S,
        idle_ttl_s: float = IDLE_TTL_S,
        max_connections: int = MAX_CONNECTIONS,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        status: StatusSink | None = None,
    ) -> None:
        # A window of 0 would make every discovery wait for ever; NaN limits nothing.
        for name, count in (("window", window), ("max_connections", max_connections)):
            if not is_count(count):
                raise InvalidValue(f"McpConnections {name} must be a positive integer")
        for name, seconds in (("failure_ttl_s", failure_ttl_s), ("idle_ttl_s", idle_ttl_s)):
            if not is_seconds(seconds):
                raise InvalidValue(f"McpConnections {name} must be a positive, finite number")
        self._window = anyio.CapacityLimiter(window)
        self._failure_ttl_s = failure_ttl_s
        self._idle_ttl_s = idle_ttl_s
        self._max_connections = max_connections
        self._clock = clock
        self._wall_clock = wall_clock
        self._status = status
        self._live: dict[tuple[str, str], _Live] = {}
        # Retired while busy: closed when the last call or holding catalog ends, or by aclose().
        self._retired: set[_Live] = set()
        self._holds: dict[str, list[_Live]] = {}
        # (agent, binding) -> the last failure, for the failure TTL.
        self._failures: dict[tuple[str, str], _Failure] = {}
        # conversation -> its session, newest last (bounded: oldest forgotten).
        self._bindings: OrderedDict[tuple[str, str], str] = OrderedDict()
        # The last state told to the status sink per (agent, server): changes only.
        self._recorded: dict[tuple[str, str], tuple[Any, ...]] = {}
        self._closed = False
        # Discoveries in the window right now, and the most seen at once (tests, bench).
        self.discovering = 0
        self.peak_discovering = 0

    def connections(self) -> tuple[tuple[str, str], ...]:
        """(session, server) of every live connection, sorted."""
        return tuple(sorted(self._live))

    def session_tools(
        self, session_id: str, agent: str
    ) -> dict[str, tuple[str, tuple[McpTool, ...]]]:
        """server -> (declaration digest, tools) of the session's usable connections of ``agent``.

        What a catalog view shows; a stale connection is left out (the next
        turn replaces it, so its tools are not on offer).
        """
        return {
            server: (live.digest, live.tools)
            for (sid, server), live in sorted(self._live.items())
            if sid == session_id and live.agent == agent and not live.stale
        }

    def hold(self, catalog_id: str, session_id: str, servers: Collection[str]) -> None:
        """A turn's catalog offers these connections' tools: none is evicted by another
        session's sweep or cap, or closed by a prune, until ``release(catalog_id)``."""
        held = [self._live[(session_id, s)] for s in servers if (session_id, s) in self._live]
        for live in held:
            live.holders += 1
        if held:
            self._holds[catalog_id] = held

    async def release(self, catalog_id: str) -> None:
        """The turn's catalog closed; a connection retired meanwhile closes now if idle."""
        for live in self._holds.pop(catalog_id, ()):
            live.holders -= 1
            if live.retired and not live.busy:
                self._retired.discard(live)
                await _close(live.connection)

    # -- reuse and eviction ----------------------------------------------------------------

    async def reusable(
        self, agent: str, session_id: str, server: McpServer, authority: str
    ) -> McpDiscovery | None:
        """The session's live connection to ``server`` if it may be reused as it is.

        A connection under another declaration, connector or authority, a stale
        one (a call timed out or was cancelled) and a dead one are evicted first.
        """
        live = self._live.get((session_id, server.name))
        if live is None:
            return None
        if live.digest != server.declaration.digest():
            why = "its declaration changed"
        elif live.binding != binding_of(server):
            why = "the agent's sandbox, workspace or URL policy changed"
        elif live.authority != authority:
            why = "the authority it was approved under changed"
        elif live.stale or not live.connection.alive:
            why = "its last call did not end normally or the server went away"
        else:
            live.last_used = self._clock()
            return McpDiscovery(server.name, "connected", live.tools, live.left_out)
        await self.evict(session_id, server.name, why)
        return None

    async def evict(
        self,
        session_id: str,
        server: str,
        why: str,
        *,
        state: str = "closed",
        only: _Live | None = None,
    ) -> None:
        """Take the session's connection to ``server`` out of the pool and close it; one a
        turn still holds (prepared, or a call in flight) closes when the turn lets it go.

        ``only``: evict that connection, not one that replaced it meanwhile (a caller that
        chose it before awaiting something).
        """
        key = (session_id, server)
        if only is not None and self._live.get(key) is not only:
            return
        live = self._live.pop(key, None)
        if live is None:
            return
        if live.busy:
            live.retired = True
            self._retired.add(live)
        else:
            await _close(live.connection)
        self._retired = {r for r in self._retired if r.busy}
        if state != "closed" or self._held_elsewhere(live.agent, server):
            return  # replaced or denied (said by the caller), or still connected elsewhere
        # The tools it listed stay on the record: an operator names them in rules.
        await self._record(
            live.agent, server, "closed", f"closed: {why}", live.tools, view=live.view
        )

    async def retain(self, session_id: str, declared: Collection[str]) -> None:
        """Close the session's connections to servers its agent no longer declares."""
        for (sid, server), live in list(self._live.items()):
            if sid == session_id and server not in declared:
                await self.evict(sid, server, "its declaration was removed", only=live)

    async def observe_binding(self, conversation: tuple[str, str], session_id: str) -> None:
        """The conversation runs in ``session_id`` now: a replaced session's connections close."""
        previous = self._bindings.pop(conversation, None)
        self._bindings[conversation] = session_id
        if len(self._bindings) > MAX_TRACKED_CONVERSATIONS:
            self._bindings.popitem(last=False)
        if previous is not None and previous != session_id:
            await self.close_session(previous)

    async def close_session(self, session_id: str) -> None:
        for (sid, server), live in list(self._live.items()):
            if sid == session_id:
                await self.evict(sid, server, "its session was replaced", only=live)

    async def sweep(self) -> None:
        """Close connections idle for longer than the idle TTL (abandoned sessions); forget
        expired failures. A connection with a call in flight is not idle."""
        now = self._clock()
        for key, live in list(self._live.items()):
            if not live.busy and now - live.last_used > self._idle_ttl_s:
                await self.evict(*key, "it was idle", only=live)
        for key, failure in list(self._failures.items()):
            if now >= failure.until:
                del self._failures[key]

    async def prune(self, declared: Collection[tuple[str, str, str]]) -> None:
        """A configuration applied: close every connection whose (agent, server, declaration
        digest) it no longer declares, in every session (a call in flight finishes first)."""
        for key, live in list(self._live.items()):
            if (live.agent, key[1], live.digest) not in declared:
                await self.evict(*key, "its declaration was removed or changed", only=live)

    # -- failures --------------------------------------------------------------------------

    def failing(self, agent: str, server: McpServer) -> McpDiscovery | None:
        """The cached diagnostic while this agent's last failure with ``server`` is fresh."""
        key = (agent, binding_of(server))
        failure = self._failures.get(key)
        if failure is None:
            return None
        if self._clock() >= failure.until:
            del self._failures[key]
            return None
        return McpDiscovery(
            server.name, "failing", detail=failure.detail, failing_until=failure.until_wall
        )

    async def denied(
        self, agent: str, session_id: str, server: McpServer, detail: str
    ) -> McpDiscovery:
        """Authority refuses the server for this turn: its connection (if any) goes."""
        await self.evict(session_id, server.name, detail, state="denied")
        if not self._held_elsewhere(agent, server.name):
            # The row is the agent's: another session's live connection keeps it connected.
            await self._record(agent, server.name, "denied", detail, view=server.declaration.view())
        return McpDiscovery(server.name, "denied", detail=detail)

    def _held_elsewhere(self, agent: str, server: str) -> bool:
        return any(live.agent == agent and s == server for (_, s), live in self._live.items())

    # -- discovery -------------------------------------------------------------------------

    async def connect(
        self, agent: str, session_id: str, server: McpServer, authority: str
    ) -> McpDiscovery:
        """Connect and discover ``server`` for the session (the gate already passed).

        Waits for a place in the window, then bounds connect plus ``list_tools``
        by ``connect_timeout_s``. A failure is cached for the failure TTL and
        leaves nothing running.
        """
        declaration = server.declaration
        cached = self.failing(agent, server)
        if cached is not None:
            return cached
        if not await self._make_room():
            detail = f"the Host holds {self._max_connections} MCP connections, all in use"
            return McpDiscovery(server.name, "failing", detail=detail)
        async with self._window:
            self.discovering += 1
            self.peak_discovering = max(self.peak_discovering, self.discovering)
            try:
                outcome = await self._discover(server)
            finally:
                self.discovering -= 1
        if isinstance(outcome, str):
            return await self._failed(agent, server, outcome)
        connection, specs = outcome
        if self._closed:
            await _close(connection)
            return McpDiscovery(server.name, "failing", detail="the Host is closing")
        live = _Live(
            agent,
            session_id,
            declaration.digest(),
            binding_of(server),
            authority,
            connection,
            declaration.view(),
            self._clock,
        )
        tools, left_out = await anyio.to_thread.run_sync(_tools_of, server, connection, live, specs)
        live.tools, live.left_out, live.last_used = tools, left_out, self._clock()
        await self.evict(session_id, server.name, "it was replaced", state="replaced")
        # Concurrent connects all passed the first check: the cap holds at the insert.
        if not await self._make_room():
            await _close(connection)
            detail = f"the Host holds {self._max_connections} MCP connections, all in use"
            return McpDiscovery(server.name, "failing", detail=detail)
        self._live[(session_id, server.name)] = live
        self._failures.pop((agent, live.binding), None)
        if left_out:
            # Once per connection (a reuse says it through the discovery, not the log).
            _log.warning("MCP server %s: %s", server.name, left_out)
        await self._record(agent, server.name, "connected", left_out, tools, view=live.view)
        return McpDiscovery(server.name, "connected", tools, left_out)

    async def _make_room(self) -> bool:
        """Evict least recently used idle connections down to the limit; False if all busy."""
        while len(self._live) >= self._max_connections:
            idle = [
                (live.last_used, key, live) for key, live in self._live.items() if not live.busy
            ]
            if not idle:
                return False
            _, key, live = min(idle, key=lambda item: (item[0], item[1]))
            await self.evict(*key, "the Host's connection limit was reached", only=live)
        return True

    async def _discover(self, server: McpServer) -> tuple[McpConnection, list[McpToolSpec]] | str:
        declaration = server.declaration
        connection: McpConnection | None = None
        try:
            with anyio.fail_after(declaration.connect_timeout_s):
                connection = await server.connector.connect(declaration)
                specs = list(await connection.list_tools())
        except TimeoutError:
            await _close(connection)
            return f"connect and discovery timed out after {declaration.connect_timeout_s:g}s"
        except anyio.get_cancelled_exc_class():
            await _close(connection)
            raise
        except Exception as exc:
            await _close(connection)
            message = unbounded_message(exc)
            redacted = Redactor.of(declaration.secret_values()).text(message or type(exc).__name__)
            return bounded(redacted, _MAX_DETAIL)
        return connection, specs

    async def _failed(self, agent: str, server: McpServer, detail: str) -> McpDiscovery:
        declaration = server.declaration
        until_wall = self._wall_clock() + self._failure_ttl_s
        self._failures[(agent, binding_of(server))] = _Failure(
            detail, self._clock() + self._failure_ttl_s, until_wall
        )
        await self._record(
            agent, declaration.name, "failing", detail, until=until_wall, view=declaration.view()
        )
        return McpDiscovery(declaration.name, "failing", detail=detail, failing_until=until_wall)

    # -- status and shutdown ---------------------------------------------------------------

    async def _record(
        self,
        agent: str,
        server: str,
        state: McpServerState,
        detail: str,
        tools: Sequence[McpTool] = (),
        *,
        until: float | None = None,
        view: Mapping[str, Any],
    ) -> None:
        """Tell the status sink about a change (not once per turn for the same state)."""
        if self._status is None:
            return
        rows = tuple(McpToolRow(t.name, t.mcp_name, t.description[:200]) for t in tools)
        seen = (state, detail, rows, until)
        if self._recorded.get((agent, server)) == seen:
            return
        self._recorded[(agent, server)] = seen
        status = McpServerStatus(
            agent,
            server,
            state,
            bounded(detail, _MAX_DETAIL),
            rows,
            until,
            self._wall_clock(),
            view,
        )
        try:
            await self._status(status)
        except Exception:  # the operator view is best effort; the turn goes on
            self._recorded.pop((agent, server), None)

    async def aclose(self) -> None:
        """Host shutdown: close every connection (every stdio process tree ends)."""
        self._closed = True
        lives = list(self._live.items())
        retired = list(self._retired)
        self._live.clear()
        self._retired.clear()
        with anyio.move_on_after(CLOSE_TIMEOUT_S, shield=True):
            async with anyio.create_task_group() as group:
                for live in [*(live for _, live in lives), *retired]:
                    group.start_soon(_close, live.connection)
        last = {(live.agent, key[1]): live for key, live in lives}
        for (agent, server), live in sorted(last.items(), key=lambda item: item[0]):
            await self._record(
                agent, server, "closed", "closed: the Host shut down", live.tools, view=live.view
            )


def _tools_of(
    server: McpServer, connection: McpConnection, live: _Live, specs: Sequence[McpToolSpec]
) -> tuple[tuple[McpTool, ...], str]:
    """Blocking (worker thread: schemas are checked): the server's tools, in name order, and
    the detail naming those left out.

    A tool whose name makes no effect name, shares its effect name with another
    of the server's tools (``get-time`` and ``get_time``: neither is offered,
    a call could not say which it meant) or whose input or output schema
    cannot be checked safely (``schema_problem``; the connection judged its
    entry and output schema, ``McpToolSpec.refusal``) is left out and named in the
    diagnostic, a schema's reason with it, not offered half-checked (a tool
    every call of which is refused would only cost the model steps).
    Declared env values are masked in descriptions, schemas and reasons; a
    tool whose name holds one is left out (and not named).
    """
    warning = server.connector.approval_warning
    redactor = Redactor.of(server.declaration.secret_values())
    named: dict[str, list[McpToolSpec]] = {}
    skipped: list[str] = []
    reasons: list[str] = []
    for spec in sorted(specs, key=lambda s: s.name)[:MAX_TOOLS_PER_SERVER]:
        effect = mcp_effect_name(server.name, spec.name)
        if redactor.leaked(spec.name):
            # Its name would carry a declared secret into the catalog, the status rows
            # and the transcript; masked, it would name nothing a call could reach.
            skipped.append(_SECRET_NAME)
        elif effect is None:
            skipped.append(bounded(spec.name, 60) or _NO_NAME)
        else:
            named.setdefault(provider_name(effect), []).append(spec)
    tools: list[McpTool] = []
    for alike in named.values():
        spec = alike[0]
        if len(alike) > 1:
            skipped.extend(bounded(each.name, 60) for each in alike)
            continue
        refusal = _refusal(spec)
        if refusal is not None:
            skipped.append(bounded(spec.name, 60))
            reason = bounded(redactor.text(refusal, limit=_MAX_REASON), _MAX_REASON)
            reasons.append(f"{bounded(spec.name, 60)}: {reason}")
            continue
        shown = dataclasses.replace(
            spec,
            description=redactor.text(spec.description),
            input_schema=redactor.value(spec.input_schema) if redactor else spec.input_schema,
        )
        effect = mcp_effect_name(server.name, spec.name)
        assert effect is not None
        tools.append(
            McpTool(effect, shown, server.declaration, connection, live, approval_warning=warning)
        )
    if len(specs) > MAX_TOOLS_PER_SERVER:
        skipped.append(f"{len(specs) - MAX_TOOLS_PER_SERVER} more")
    return tuple(sorted(tools, key=lambda t: t.name)), _left_out_detail(skipped, reasons)


def _refusal(spec: McpToolSpec) -> str | None:
    """Why ``spec`` is kept out of the catalog: the connection's verdict on its entry and
    schemas, else its input schema's problem."""
    if spec.refusal is not None:
        return spec.refusal
    problem = schema_problem(spec.input_schema)
    return None if problem is None else schema_refusal(problem, "input")


_SECRET_NAME = "a tool whose name holds a declared secret"
_NO_NAME = "a tool with no name"
# One left-out tool's reason in the detail: the names come first, so a long reason or
# many of them never hide which tools are missing.
_MAX_REASON = 120


def binding_of(server: McpServer) -> str:
    """The declaration together with the connector it is reached through (the agent's
    sandbox, workspace and URL policy): a connection is reused only under both."""
    return authority_of(server.declaration.digest(), server.connector.identity)


def _left_out_detail(skipped: Sequence[str], reasons: Sequence[str]) -> str:
    if not skipped:
        return ""
    named = "tools left out (no usable name or schema): " + ", ".join(skipped)
    return bounded("; ".join((named, *reasons)), _MAX_DETAIL)


async def _close(connection: McpConnection | None) -> None:
    """Close a connection under a deadline, shielded: eviction must finish even when the
    turn that triggered it is being cancelled."""
    if connection is None:
        return
    with anyio.move_on_after(CLOSE_TIMEOUT_S, shield=True):
        try:
            await connection.aclose()
        except Exception:
            return


def authority_of(*parts: Mapping[str, Any] | str) -> str:
    """A stable digest of what a connection's approval depended on."""
    payload = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:24]

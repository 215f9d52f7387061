"""MCP as an effect source: declarations, and the protocol a concrete client implements.

The seam knows no SDK. ``hostkit.builtins.mcp`` implements ``McpConnector``
on the official ``mcp`` SDK (stdio children in the agent's sandbox, streamable
HTTP through the shared URL policy); ``McpConnections`` (``_mcp_pool``) owns
the session-scoped connections; the EffectRuntime gates ``mcp.connect:<server>``
before any connector is asked for anything.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from hostkit.effects._authored import ToolOutcome, is_timeout
from hostkit.errors import InvalidValue
from hostkit.freeze import FrozenMap
from hostkit.types import argv_credentials, safe_argv, url_view

__all__ = [
    "MCP_SERVER_NAME_PATTERN",
    "McpConnection",
    "McpConnector",
    "McpServer",
    "McpServerDeclaration",
    "McpToolSpec",
    "mcp_call_grant",
    "mcp_connect_grant",
]

# A server's name is part of effect names (``mcp.<server>.<tool>``) and grants.
MCP_SERVER_NAME_PATTERN = r"[a-z][a-z0-9_]{0,31}"
_SERVER_NAME = re.compile(MCP_SERVER_NAME_PATTERN)
McpTransport = Literal["stdio", "http"]


def mcp_connect_grant(server: str) -> str:
    """The capability (and policy effect) that lets a session connect to ``server``."""
    return f"mcp.connect:{server}"


def mcp_call_grant(server: str) -> str:
    """The capability every call of one of ``server``'s tools needs."""
    return f"mcp.call:{server}"


@dataclass(frozen=True, slots=True)
class McpServerDeclaration:
    """One MCP server an agent declares: a stdio command or a streamable-HTTP URL.

    ``env`` holds the declared environment entries a stdio child gets on top
    of the Host's allowlist (their values are never shown: ``view`` names
    them only). ``network`` lets a stdio child's sandbox reach the network.
    ``connect_timeout_s`` bounds starting, initializing and one ``list_tools``;
    ``call_timeout_s`` bounds one tool call.
    """

    name: str
    transport: McpTransport
    command: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=FrozenMap)
    url: str | None = None
    network: bool = False
    connect_timeout_s: float = 30.0
    call_timeout_s: float = 60.0

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _SERVER_NAME.fullmatch(self.name):
            raise InvalidValue(f"MCP server name must match {MCP_SERVER_NAME_PATTERN}")
        if self.transport not in ("stdio", "http"):
            raise InvalidValue('MCP server transport must be "stdio" or "http"')
        if self.transport == "stdio" and not self.command:
            raise InvalidValue("a stdio MCP server needs a command")
        if self.transport == "http" and not self.url:
            raise InvalidValue("an http MCP server needs a url")
        for key in ("connect_timeout_s", "call_timeout_s"):
            if not is_timeout(getattr(self, key)):
                raise InvalidValue(f"MCP server {key} must be a number of seconds in (0, 86400]")
        object.__setattr__(self, "env", FrozenMap(dict(self.env)))

    def digest(self) -> str:
        """Identity of the declaration, secrets included: any change is a new connection."""
        payload = json.dumps(
            [
                self.name,
                self.transport,
                list(self.command),
                sorted(self.env.items()),
                self.url,
                self.network,
                self.connect_timeout_s,
                self.call_timeout_s,
            ]
        )
        return "mcpd-" + hashlib.sha256(payload.encode()).hexdigest()[:24]

    def view(self) -> FrozenMap:
        """What an approver and an operator see: never an env value or URL credentials."""
        shown: dict[str, Any] = {"server": self.name, "transport": self.transport}
        if self.transport == "stdio":
            # Credentials on the command line too ("--token X", "password=X", an env value
            # repeated there): hidden as every view of a command line hides them.
            shown["command"] = safe_argv(self.command, self.env.values())
            shown["env"] = sorted(self.env)
            shown["network"] = self.network
        else:
            # No userinfo, the query (it often carries a key) and token-shaped path parts masked.
            shown["url"] = url_view(self.url or "")[0]
        return FrozenMap(shown)

    def secret_values(self) -> FrozenMap:
        """Every value of the declaration no result, error or log line may show, labelled
        ``mcp.<server>.<what>``: the env values, and the credentials its command line or
        URL marks (``argv_credentials``, ``url_view``: a URL's password, secret-named
        query values, token-shaped path segments and query values such as
        ``/s/<token>/mcp``; a word a view hides only for its length, a long path or
        word, is no secret). No environment name has a dot, so a label never clashes
        with a held secret's."""
        prefix = f"mcp.{self.name}"
        values = {f"{prefix}.{name}": value for name, value in self.env.items()}
        if self.transport == "stdio":
            hidden, where = argv_credentials(self.command, self.env.values()), "argv"
        else:
            hidden, where = url_view(self.url or "")[1], "url"
        for index, value in enumerate(sorted(hidden - set(self.env.values())), 1):
            values[f"{prefix}.{where}.{index}"] = value
        return FrozenMap(values)


@dataclass(frozen=True, slots=True)
class McpToolSpec:
    """One tool a server listed: its MCP name, description and input schema.

    ``refusal`` says why the connection will not call it as listed (its entry,
    name or input schema is one the Host cannot use, or its output schema
    failed the Host's checks, which the client applies to results): the pool
    leaves such a tool out of the catalog and names it with this reason, as it
    does one whose input schema fails them. One tool's problem is its own: the
    server's other tools are listed as usual.
    """

    name: str
    description: str
    input_schema: Mapping[str, Any]
    refusal: str | None = None


class McpConnection(Protocol):
    """A live, initialized client session with one server (one per session and server).

    ``call_tool`` returns a ``ToolOutcome``: ``succeeded``, ``failed`` (the
    server reported an error; bounded reason) or ``indeterminate`` (the
    server died or the stream broke while the call ran: it may have acted).
    The runtime's deadline cancels a hung call (``timed_out``); the pool then
    evicts the connection. ``alive`` is False once the transport is gone.
    """

    @property
    def alive(self) -> bool: ...

    async def list_tools(self) -> Sequence[McpToolSpec]: ...

    async def call_tool(self, name: str, arguments: Mapping[str, Any]) -> ToolOutcome: ...

    async def aclose(self) -> None: ...


class McpConnector(Protocol):
    """Starts (stdio) or opens (http) a connection and initializes the MCP session.

    Called only after the ``mcp.connect:<server>`` gate passed. One
    connector is bound to one agent's sandbox, workspace and URL policy.
    Raises ``UserError`` for a refusal (no sandbox, a refused address) and
    any other exception for a failure; the caller bounds it with the
    declaration's ``connect_timeout_s`` and closes what was started.
    ``approval_warning`` is shown with the connect prompt (an unsandboxed child).
    ``identity`` is a stable digest of everything the connector reaches a
    server under (sandbox, workspace, URL policy, environment allowlist): a
    connection made under another identity is not reused.
    """

    @property
    def approval_warning(self) -> str | None: ...

    @property
    def identity(self) -> str: ...

    async def connect(self, declaration: McpServerDeclaration) -> McpConnection: ...


@dataclass(frozen=True, slots=True)
class McpServer:
    """A declared server together with the connector bound to its agent."""

    declaration: McpServerDeclaration
    connector: McpConnector

    @property
    def name(self) -> str:
        return self.declaration.name

"""One MCP server an agent declares (``[agents.<agent>.mcp.<server>]`` or a core's
``agent.yaml`` ``mcp:``), validated strictly.

A server is a stdio ``command`` (argv; the Host starts it in the agent's
sandbox) or a streamable-HTTP ``url``, never both. Everything is checked
here, before a Host opens, so a bad table is one ``ConfigError`` naming
``agents.<agent>.mcp.<server>`` and not a failure at the first connect.
``declaration`` turns the table into the seam value the EffectRuntime and
the connection pool use.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Annotated, ClassVar

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from hostkit._frozen_fields import AS_FROZEN_LIST, FrozenTable
from hostkit.effects._mcp import MCP_SERVER_NAME_PATTERN, McpServerDeclaration
from hostkit.effects._runtime import ENV_NAME_PATTERN
from hostkit.freeze import FrozenMap
from hostkit.providers import http_url_problem

__all__ = [
    "MAX_MCP_ARGS",
    "MAX_MCP_ARG_CHARS",
    "MAX_MCP_ENV",
    "MAX_MCP_ENV_VALUE_CHARS",
    "MAX_MCP_SERVERS",
    "MAX_MCP_URL_CHARS",
    "McpServerConfig",
    "McpServerName",
]

# Hand-written tables: these bounds are far past any real server and keep a bad file small.
MAX_MCP_SERVERS = 32
MAX_MCP_ARGS = 128
MAX_MCP_ARG_CHARS = 4_096
MAX_MCP_ENV = 64
MAX_MCP_ENV_VALUE_CHARS = 8_192
MAX_MCP_URL_CHARS = 2_048
_ENV_NAME = re.compile(ENV_NAME_PATTERN)

# The table key: it becomes part of effect names (mcp.<server>.<tool>) and grants.
McpServerName = Annotated[str, Field(pattern=f"^{MCP_SERVER_NAME_PATTERN}$")]
# A stdio server's argv. The bound goes before AS_FROZEN_LIST (not on the optional field):
# too long an argv is then told as a list is everywhere else.
_Argv = Annotated[tuple[str, ...], Field(max_length=MAX_MCP_ARGS), AS_FROZEN_LIST]


class McpServerConfig(BaseModel):
    """One declared MCP server: exactly one of ``command`` (stdio) and ``url`` (http).

    ``env`` entries are given to a stdio child on top of the Host's allowlist
    (values are never shown; operators see the names). ``network`` lets a
    stdio child's sandbox reach the network. The timeouts bound one connect
    (start, initialize, list tools) and one tool call.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    # freeze() keeps it as it is (hostkit.freeze.DEEPLY_FROZEN): every container is frozen.
    __hostkit_deeply_frozen__: ClassVar[bool] = True

    command: _Argv | None = None
    # Its length is checked with the rest of the URL (``_check_url``), at the table's key.
    url: str | None = None
    env: FrozenTable[str, Annotated[str, Field(max_length=MAX_MCP_ENV_VALUE_CHARS)]] = Field(
        default_factory=FrozenMap
    )
    network: bool = False
    connect_timeout_seconds: float = Field(default=30.0, gt=0, le=600)
    call_timeout_seconds: float = Field(default=60.0, gt=0, le=3600)

    @pydantic.model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("an MCP server has exactly one of 'command' (stdio) or 'url' (http)")
        if self.command is not None:
            _check_argv(self.command)
        else:
            _check_url(self.url or "")
            if self.network:
                raise ValueError("'network' applies to a stdio 'command' only, not to a 'url'")
            if self.env:
                raise ValueError("'env' applies to a stdio 'command' only, not to a 'url'")
        _check_env(self.env)
        return self

    @property
    def transport(self) -> str:
        return "stdio" if self.command is not None else "http"

    def declaration(self, name: str) -> McpServerDeclaration:
        """The seam value for server ``name`` (the table key, already checked)."""
        if self.command is not None:
            return McpServerDeclaration(
                name=name,
                transport="stdio",
                command=tuple(self.command),
                env=dict(self.env),
                network=self.network,
                connect_timeout_s=self.connect_timeout_seconds,
                call_timeout_s=self.call_timeout_seconds,
            )
        return McpServerDeclaration(
            name=name,
            transport="http",
            url=self.url,
            connect_timeout_s=self.connect_timeout_seconds,
            call_timeout_s=self.call_timeout_seconds,
        )


def _check_argv(argv: Sequence[str]) -> None:
    if not argv or not argv[0].strip():
        raise ValueError("'command' is an argv list whose first item names the program")
    for index, arg in enumerate(argv):
        if "\x00" in arg:
            raise ValueError(f"'command' item {index} contains a NUL byte")
        if len(arg) > MAX_MCP_ARG_CHARS:
            raise ValueError(f"'command' item {index} is over {MAX_MCP_ARG_CHARS} characters")
    program = argv[0]
    if "/" in program and not program.startswith("/"):
        raise ValueError(
            "'command' starts with a program name (found on PATH) or an absolute path, "
            "not a relative path"
        )


def _check_url(url: str) -> None:
    if (problem := http_url_problem(url, limit=MAX_MCP_URL_CHARS)) is not None:
        raise ValueError(f"'url' {problem} (a streamable-HTTP endpoint)")


def _check_env(env: Mapping[str, str]) -> None:
    if len(env) > MAX_MCP_ENV:
        raise ValueError(f"'env' has {len(env)} entries; at most {MAX_MCP_ENV}")
    for key, value in env.items():
        if not _ENV_NAME.fullmatch(key):
            shown = key[:40] + ("…" if len(key) > 40 else "")
            raise ValueError(
                f"'env' name {shown!r} is not an environment variable name "
                f"(letters, digits, underscore; not starting with a digit)"
            )
        if "\x00" in value:
            raise ValueError(f"'env' value of {key} contains a NUL byte")

"""The store's MCP group: the last known state of each agent's declared MCP servers.

The connection pool records every state change (``record_mcp_status``); an
operator reads the rows (``hostkit mcp list``) from any process without
connecting anything. A row is (agent, server), overwritten by each change.
What a server says about itself (its tools' names and descriptions, a
failure's text) is bounded here, so a chatty server cannot grow the table or
make recording fail. Nothing here is owned by a principal: the rows describe
the Host's configuration, not any session.
"""

from __future__ import annotations

import json
import math
import sqlite3
import time
from abc import ABC, abstractmethod
from collections.abc import Collection
from typing import TYPE_CHECKING, Any, get_args

from hostkit.errors import InvalidValue, bounded
from hostkit.freeze import freeze, thaw
from hostkit.types import McpServerState, McpServerStatus, McpToolRow

if TYPE_CHECKING:
    from hostkit.store._row_store import RowStore

__all__ = [
    "MAX_MCP_DESCRIPTION_CHARS",
    "MAX_MCP_DETAIL_CHARS",
    "MAX_MCP_STATUS_ROWS",
    "MAX_MCP_TOOLS",
    "McpStatusStore",
    "SqlMcpStatusStore",
]

MAX_MCP_DETAIL_CHARS = 300
MAX_MCP_TOOLS = 128
MAX_MCP_DESCRIPTION_CHARS = 200
# Far past agents x servers of any configuration; a read never returns more.
MAX_MCP_STATUS_ROWS = 4_096
_MAX_NAME = 200
_MAX_KEEP = 1_024
# A declaration view past this is kept as its server and transport only.
_MAX_DECLARATION_BYTES = 16_384
_STATES: tuple[str, ...] = get_args(McpServerState)


class McpStatusStore(ABC):
    """MCP server statuses keyed (agent, server); every adapter implements this group.

    Bad input (an empty or overlong agent or server name, an unknown state, a
    time that is not a finite number) raises ``InvalidValue`` and writes
    nothing; server-supplied text is cut, never refused.
    """

    @abstractmethod
    async def record_mcp_status(self, status: McpServerStatus) -> None:
        """Insert or replace the row of (``status.agent``, ``status.server``).

        ``detail`` is cut to ``MAX_MCP_DETAIL_CHARS`` (one line, secrets
        redacted), ``tools`` to the first ``MAX_MCP_TOOLS``, each description
        to ``MAX_MCP_DESCRIPTION_CHARS``. ``updated_at`` 0 means now.
        """

    @abstractmethod
    async def mcp_statuses(self, agent: str | None = None) -> tuple[McpServerStatus, ...]:
        """Every stored status (or ``agent``'s), ordered by agent, then server."""

    @abstractmethod
    async def forget_mcp_servers(self, agent: str, keep: Collection[str]) -> int:
        """Delete ``agent``'s rows whose server is not in ``keep``; how many went."""


def _name(what: str, value: object) -> str:
    if not isinstance(value, str) or not value or len(value) > _MAX_NAME:
        raise InvalidValue(f"MCP status {what} must be a string of 1-{_MAX_NAME} characters")
    return value


def _time(what: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidValue(f"MCP status {what} must be a finite number of seconds")
    return float(value)


def _tools_json(tools: tuple[McpToolRow, ...]) -> str:
    rows = [
        {
            "effect": str(tool.effect)[:_MAX_NAME],
            "name": str(tool.name)[:_MAX_NAME],
            "description": bounded(tool.description, MAX_MCP_DESCRIPTION_CHARS),
        }
        for tool in tools[:MAX_MCP_TOOLS]
    ]
    return json.dumps(rows, ensure_ascii=False)


def _declaration_json(view: Any) -> str:
    plain = thaw(view) if view else {}
    if not isinstance(plain, dict):
        raise InvalidValue("MCP status declaration must be a mapping (the declaration's view)")
    text = json.dumps(plain, ensure_ascii=False, sort_keys=True, default=str)
    if len(text.encode()) <= _MAX_DECLARATION_BYTES:
        return text
    kept = {key: plain[key] for key in ("server", "transport") if key in plain}
    return json.dumps({**kept, "cut": True}, ensure_ascii=False, sort_keys=True, default=str)


def _status(row: sqlite3.Row) -> McpServerStatus:
    tools = tuple(
        McpToolRow(effect=t["effect"], name=t["name"], description=t["description"])
        for t in json.loads(row["tools"])
    )
    return McpServerStatus(
        agent=row["agent"],
        server=row["server"],
        state=row["state"],
        detail=row["detail"],
        tools=tools,
        failing_until=row["failing_until"],
        updated_at=row["updated_at"],
        declaration=freeze(json.loads(row["declaration"])),
    )


class SqlMcpStatusStore(McpStatusStore):
    """The SQLite adapter of McpStatusStore: the ``mcp_servers`` table (migration 11)."""

    def __init__(self, db: RowStore) -> None:
        self._db = db

    async def record_mcp_status(self, status: McpServerStatus) -> None:
        if not isinstance(status, McpServerStatus):
            raise InvalidValue("record_mcp_status takes an McpServerStatus")
        agent = _name("agent", status.agent)
        server = _name("server", status.server)
        if status.state not in _STATES:
            raise InvalidValue(f"MCP status state must be one of {', '.join(_STATES)}")
        failing_until = (
            None if status.failing_until is None else _time("failing_until", status.failing_until)
        )
        updated_at = _time("updated_at", status.updated_at) or time.time()
        values = [
            agent,
            server,
            status.state,
            bounded(status.detail, MAX_MCP_DETAIL_CHARS) if status.detail else "",
            _tools_json(tuple(status.tools)),
            failing_until,
            updated_at,
            _declaration_json(status.declaration),
        ]

        def upsert(raw: sqlite3.Connection) -> None:
            raw.execute(
                "INSERT INTO mcp_servers (agent, server, state, detail, tools, failing_until, "
                "updated_at, declaration) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (agent, server) DO UPDATE SET state = excluded.state, "
                "detail = excluded.detail, tools = excluded.tools, "
                "failing_until = excluded.failing_until, updated_at = excluded.updated_at, "
                "declaration = excluded.declaration",
                values,
            )

        await self._db.write(upsert)

    async def mcp_statuses(self, agent: str | None = None) -> tuple[McpServerStatus, ...]:
        if agent is not None:
            _name("agent", agent)

        def select(raw: sqlite3.Connection) -> tuple[McpServerStatus, ...]:
            cursor = raw.cursor()
            cursor.row_factory = sqlite3.Row
            rows = cursor.execute(
                "SELECT agent, server, state, detail, tools, failing_until, updated_at, "
                "declaration FROM mcp_servers WHERE (? IS NULL OR agent = ?) "
                "ORDER BY agent, server LIMIT ?",
                [agent, agent, MAX_MCP_STATUS_ROWS],
            ).fetchall()
            return tuple(_status(row) for row in rows)

        return await self._db.read(select)

    async def forget_mcp_servers(self, agent: str, keep: Collection[str]) -> int:
        _name("agent", agent)
        if isinstance(keep, str):
            raise InvalidValue("keep is a collection of server names, not one string")
        kept = sorted({_name("server", server) for server in keep})
        if len(kept) > _MAX_KEEP:
            raise InvalidValue(f"keep names at most {_MAX_KEEP} servers")

        def delete(raw: sqlite3.Connection) -> int:
            cursor = raw.execute(
                "DELETE FROM mcp_servers WHERE agent = ? "
                "AND server NOT IN (SELECT value FROM json_each(?))",
                [agent, json.dumps(kept)],
            )
            return cursor.rowcount

        return await self._db.write(delete)

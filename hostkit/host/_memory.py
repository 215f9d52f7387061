"""The default MemorySource: agent memory on SQLite FTS5 in the runtime store."""

from __future__ import annotations

import re
import sqlite3

from hostkit.effects import AuthoredTool, ToolContext
from hostkit.errors import InvalidValue
from hostkit.host._capabilities import AgentMemory, MemoryRequest
from hostkit.store import RuntimeStore, now

__all__ = ["SqliteMemory", "SqliteMemorySource", "memory_tools"]

MAX_MEMORY_CHARS = 4_000
MAX_RECALL = 20
_WORD = re.compile(r"\w+", re.UNICODE)


class SqliteMemory:
    """Full-text memory of one agent, partitioned by owner."""

    def __init__(self, store: RuntimeStore, agent: str) -> None:
        self._store = store
        self.agent = agent

    async def remember(self, owner: str, text: str) -> None:
        if not text.strip() or len(text) > MAX_MEMORY_CHARS:
            raise InvalidValue(f"memory items are 1-{MAX_MEMORY_CHARS} characters")
        await self._store.write(
            lambda conn: conn.execute(
                "INSERT INTO memory_items (agent, principal_id, text, created_at) "
                "VALUES (?, ?, ?, ?)",
                [self.agent, owner, text, now(conn)],
            )
        )

    async def recall(self, owner: str, query: str, *, limit: int = 5) -> list[str]:
        terms = _WORD.findall(query)[:16]
        if not terms:
            return []
        match = " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)
        bounded_limit = max(1, min(limit, MAX_RECALL))

        def search(conn: sqlite3.Connection) -> list[str]:
            rows = conn.execute(
                "SELECT m.text FROM memory_fts f JOIN memory_items m ON m.id = f.rowid "
                "WHERE memory_fts MATCH ? AND m.agent = ? AND m.principal_id = ? "
                "ORDER BY bm25(memory_fts) LIMIT ?",
                [match, self.agent, owner, bounded_limit],
            ).fetchall()
            return [row[0] for row in rows]

        return await self._store.read(search)


class SqliteMemorySource:
    """One ``SqliteMemory`` per agent for the generation that owns this source."""

    def __init__(self, store: RuntimeStore) -> None:
        self._store = store
        self._by_agent: dict[str, SqliteMemory] = {}

    async def memory(self, request: MemoryRequest) -> AgentMemory:
        memory = self._by_agent.get(request.agent)
        if memory is None:
            memory = self._by_agent[request.agent] = SqliteMemory(self._store, request.agent)
        return memory


def memory_tools(memory: AgentMemory) -> list[AuthoredTool]:
    """``memory.recall`` and ``memory.store`` bound to one agent's memory."""

    async def recall(ctx: ToolContext, query: str, limit: int = 5) -> list[str]:
        """Search what you stored earlier in this conversation's memory."""
        return await memory.recall(ctx.owner, query, limit=limit)

    async def store(ctx: ToolContext, text: str) -> str:
        """Remember a short fact for later turns."""
        await memory.remember(ctx.owner, text)
        return "stored"

    return [AuthoredTool("memory.recall", recall), AuthoredTool("memory.store", store)]

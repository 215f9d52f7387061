"""The store's memory group: agent memory items and their full-text index.

Items belong to one agent and one owner (the principal that stored them);
every query is partitioned by both in SQL, so an owner never sees another's.
``recall`` takes the user's words, not a query language: the SQLite adapter
turns them into quoted FTS5 terms, so no input can become FTS5 syntax (an
operator, a prefix ``*``, ``NEAR``, a column filter) or a syntax error.
Both adapters match the words ``_words`` gives (each item's, kept in its
``search_words`` column at ``remember``), so the same words find the same items
on SQLite and on PostgreSQL in any server locale.
On SQLite the match itself is within the owner's items (their token in an
FTS5 column no word can address), so a recall joins and ranks the owner's
items alone, not every owner's matches (bm25 still weighs a word by the
whole index, as before: counting its rows is the one cost left that grows).
A forget deletes the row; on SQLite the FTS5 delete leaves the item's words in
older index segments until later writes merge them, as a deleted row leaves
bytes in freed pages. Neither an ``optimize`` per forget (a rewrite of every
owner's index on the one write lock, at the model's call) nor FTS5's
``secure-delete`` (it moves the table to a format SQLite before 3.42 cannot
read: an operator's shell, a restored backup) is used: docs/store.md gives the
purge that removes both.

Anyone who can talk to an agent can make it store items, so each owner's
items are bounded in number and total size; the bound is checked inside the
insert's own write transaction (serialised on both adapters), so concurrent
writers cannot pass it together. Because a full memory refuses every new
item, an owner's items can be listed and forgotten (one, or all of them),
always under the same (agent, owner) predicate in SQL; each item keeps the
session and turn that stored it, so text planted by a steered model can be
traced to the conversation it came from.
"""

from __future__ import annotations

import sqlite3
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hostkit.errors import InvalidValue, NotFoundOrUnauthorized
from hostkit.store._checks import check_reason, check_ref
from hostkit.store._dialect import is_postgres
from hostkit.store._owned import now
from hostkit.store._sessions import insert_audit
from hostkit.store._words import query_phrases, search_words

if TYPE_CHECKING:
    from hostkit.store._row_store import RowStore
    from hostkit.types import PrincipalScope

__all__ = [
    "MAX_MEMORY_CHARS",
    "MAX_MEMORY_CHARS_PER_OWNER",
    "MAX_MEMORY_ITEMS_PER_OWNER",
    "MAX_MEMORY_LIST",
    "MAX_MEMORY_OWNER_CHARS",
    "MAX_QUERY_CHARS",
    "MAX_QUERY_TERMS",
    "MAX_RECALL",
    "MemoryItem",
    "MemoryStore",
    "SqlMemoryStore",
]

MAX_MEMORY_CHARS = 4_000
MAX_MEMORY_ITEMS_PER_OWNER = 1_000
MAX_MEMORY_CHARS_PER_OWNER = 1_000_000
MAX_MEMORY_OWNER_CHARS = 300
MAX_QUERY_CHARS = 2_000
MAX_QUERY_TERMS = 16
MAX_RECALL = 20
# One page of an owner's items (``list_items``); a full memory is five pages.
MAX_MEMORY_LIST = 200
# Item ids are positive 64-bit integers on both adapters.
_MAX_ITEM_ID = 2**63 - 1


@dataclass(frozen=True, slots=True)
class MemoryItem:
    """One remembered text of one agent's owner, and where it came from.

    ``session_id`` and ``turn_id`` name the turn whose call stored it (None for
    items stored before v23 of the schema, or outside a turn).
    """

    item_id: int
    agent: str
    owner: str
    text: str
    created_at: str
    session_id: str | None = None
    turn_id: str | None = None


class MemoryStore(ABC):
    """Agent memory, partitioned by (agent, owner); every adapter implements this group.

    Bad input raises ``InvalidValue`` with a bounded message and stores nothing.
    """

    @abstractmethod
    async def remember(
        self,
        *,
        agent: str,
        owner: str,
        text: str,
        session_id: str | None = None,
        turn_id: str | None = None,
    ) -> MemoryItem:
        """Store ``text`` (1..``MAX_MEMORY_CHARS`` characters of Unicode, no NUL) for the owner.

        An owner (agent and principal) keeps at most ``MAX_MEMORY_ITEMS_PER_OWNER``
        items of at most ``MAX_MEMORY_CHARS_PER_OWNER`` characters in all; past
        that ``InvalidValue`` ("memory is full") and nothing is stored.
        ``session_id`` and ``turn_id`` record which turn stored it.
        """

    @abstractmethod
    async def list_items(
        self, *, agent: str, owner: str, limit: int = 50, before: int | None = None
    ) -> tuple[MemoryItem, ...]:
        """The owner's items newest first, with provenance: one page of ``limit``
        (1..``MAX_MEMORY_LIST``); ``before`` (an item id) starts the next page."""

    @abstractmethod
    async def forget(
        self,
        *,
        agent: str,
        owner: str,
        item_id: int,
        by: PrincipalScope | None = None,
        reason: str | None = None,
    ) -> MemoryItem:
        """Delete one of the owner's items and return it.

        ``NotFoundOrUnauthorized`` alike for a missing id and another owner's.
        ``by`` (a scope this store issued, with ``reason``) is who asked outside
        a turn: a ``memory.forgotten`` audit row is written in the same
        transaction, and a scope that is not an operator's forgets only its
        own principal's items.
        """

    @abstractmethod
    async def forget_all(
        self,
        *,
        agent: str,
        owner: str,
        by: PrincipalScope | None = None,
        reason: str | None = None,
    ) -> int:
        """Delete every item of the owner; returns how many (audited as ``forget``)."""

    @abstractmethod
    async def recall(
        self, *, agent: str, owner: str, query: str, limit: int = 5
    ) -> tuple[MemoryItem, ...]:
        """The owner's items best matching any word of ``query``, best first.

        ``query`` is plain text (at most ``MAX_QUERY_CHARS`` characters): its
        first ``MAX_QUERY_TERMS`` words are matched literally, punctuation and
        query-language keywords included as plain words; no words, no items.
        Words match whatever their case and accents (``ecole`` finds ``École``);
        punctuation separates them (``example`` finds ``bob@example.com``), and
        a word joined by ``_`` matches its parts in order (``foo_bar``).
        ``limit`` is 1..``MAX_RECALL``.
        """


def _name(what: str, value: object, limit: int) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > limit:
        raise InvalidValue(
            f"memory {what} must be a non-empty string of at most {limit} characters"
        )
    _unicode(what, value)
    return value


def _item_id(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= _MAX_ITEM_ID:
        raise InvalidValue("a memory item id is a positive integer")
    return int(value)


def _provenance(what: str, value: object) -> str | None:
    return None if value is None else check_ref(f"memory {what}", value)


def _unicode(what: str, value: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidValue(f"memory {what} is not valid Unicode (lone surrogate)") from exc


def _quoted(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def _fts_query(owner_token: str, phrases: list[str]) -> str:
    """An FTS5 MATCH expression: the owner's token AND any of ``phrases`` in the words.

    Words hold no quote, colon, brace, operator or parenthesis; each phrase is still
    quoted (``"NEAR"`` is a word, not an operator), and all of them are under the
    ``search_words`` column filter, so no word can reach the owner column. The token
    makes FTS5 walk only the owner's items instead of ranking every owner's matches.
    """
    words = " OR ".join(_quoted(phrase) for phrase in phrases)
    return f"owner_token : {_quoted(owner_token)} AND search_words : ({words})"


_COLUMNS = ("id", "agent", "principal_id", "text", "created_at", "session_id", "turn_id")
_ITEM_COLUMNS = ", ".join(f"m.{column}" for column in _COLUMNS)
# Weight 0 for the owner column: only the item's words score (its token adds one to
# every item's length, which moves no item's rank but among near-equal scores).
_FTS_SEARCH = (
    f"SELECT {_ITEM_COLUMNS} "
    "FROM memory_fts f JOIN memory_items m ON m.id = f.rowid "
    "WHERE memory_fts MATCH ? AND m.agent = ? AND m.principal_id = ? "
    "ORDER BY bm25(memory_fts, 0.0, 1.0), m.id LIMIT ?"
)
_OWNER_TOKEN = (
    "SELECT owner_token FROM memory_items WHERE agent = ? AND principal_id = ? "
    "AND owner_token IS NOT NULL LIMIT 1"
)


def _pg_search(count: int) -> str:
    """PostgreSQL: each phrase is its own ``phraseto_tsquery`` (never tsquery syntax), ORed."""
    query = " || ".join(["phraseto_tsquery('simple', ?)"] * count)
    return (
        f"SELECT {_ITEM_COLUMNS} "
        f"FROM memory_items m CROSS JOIN (SELECT {query} AS query) AS q "
        "WHERE m.search @@ q.query AND m.agent = ? AND m.principal_id = ? "
        "ORDER BY ts_rank(m.search, q.query) DESC, m.id LIMIT ?"
    )


_LIST = (
    f"SELECT {_ITEM_COLUMNS} FROM memory_items m "
    "WHERE m.agent = ? AND m.principal_id = ? AND m.id < ? ORDER BY m.id DESC LIMIT ?"
)


def _items(raw: sqlite3.Connection, sql: str, params: list[object]) -> tuple[MemoryItem, ...]:
    cursor = raw.cursor()
    cursor.row_factory = sqlite3.Row
    return tuple(
        MemoryItem(
            item_id=row["id"],
            agent=row["agent"],
            owner=row["principal_id"],
            text=row["text"],
            created_at=row["created_at"],
            session_id=row["session_id"],
            turn_id=row["turn_id"],
        )
        for row in cursor.execute(sql, params).fetchall()
    )


def _check_room(raw: sqlite3.Connection, agent: str, owner: str, adding: int) -> None:
    """Refuse an item that would take the owner past the per-owner bounds.

    Runs in the insert's write transaction, so the count and the insert are one.
    """
    items, chars = raw.execute(
        "SELECT COUNT(*), COALESCE(SUM(LENGTH(text)), 0) FROM memory_items "
        "WHERE agent = ? AND principal_id = ?",
        [agent, owner],
    ).fetchone()
    if items + 1 > MAX_MEMORY_ITEMS_PER_OWNER or chars + adding > MAX_MEMORY_CHARS_PER_OWNER:
        raise InvalidValue(
            f"memory is full: {items} items / {chars} characters for this person and agent; "
            f"at most {MAX_MEMORY_ITEMS_PER_OWNER} items and {MAX_MEMORY_CHARS_PER_OWNER} "
            "characters are kept, so this was not stored"
        )


def _audit(
    raw: sqlite3.Connection,
    by: PrincipalScope,
    reason: str,
    agent: str,
    owner: str,
    item_id: int | None,
    count: int,
    session_id: str | None,
) -> None:
    """The ``memory.forgotten`` row of a forget outside a turn (never the item's text)."""
    insert_audit(
        raw,
        "memory.forgotten",
        scope=by,
        session_id=session_id,
        subject=f"memory:{item_id}" if item_id is not None else f"memory:{agent}:all",
        reason=reason,
        detail={"agent": agent, "owner": owner, "item_id": item_id, "count": count},
    )


class SqlMemoryStore(MemoryStore):
    """MemoryStore on ``memory_items``: FTS5 on SQLite, a ``tsvector`` index on PostgreSQL."""

    def __init__(self, db: RowStore) -> None:
        self._db = db

    async def remember(
        self,
        *,
        agent: str,
        owner: str,
        text: str,
        session_id: str | None = None,
        turn_id: str | None = None,
    ) -> MemoryItem:
        _name("agent", agent, MAX_MEMORY_OWNER_CHARS)
        _name("owner", owner, MAX_MEMORY_OWNER_CHARS)
        session_id = _provenance("session_id", session_id)
        turn_id = _provenance("turn_id", turn_id)
        if not isinstance(text, str) or not text.strip() or len(text) > MAX_MEMORY_CHARS:
            raise InvalidValue(f"memory items are 1-{MAX_MEMORY_CHARS} characters")
        _unicode("text", text)
        if "\x00" in text:
            # PostgreSQL cannot store NUL in text; SQLite could: refused on both alike.
            raise InvalidValue("memory text must not contain a NUL character")

        def insert(raw: sqlite3.Connection) -> MemoryItem:
            _check_room(raw, agent, owner, len(text))
            created_at = now(raw)
            cursor = raw.execute(
                "INSERT INTO memory_items (agent, principal_id, text, created_at, session_id, "
                "turn_id, search_words) VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id",
                [agent, owner, text, created_at, session_id, turn_id, search_words(text)],
            )
            item_id = int(cursor.fetchone()[0])
            return MemoryItem(item_id, agent, owner, text, created_at, session_id, turn_id)

        return await self._db.write(insert)

    async def recall(
        self, *, agent: str, owner: str, query: str, limit: int = 5
    ) -> tuple[MemoryItem, ...]:
        _name("agent", agent, MAX_MEMORY_OWNER_CHARS)
        _name("owner", owner, MAX_MEMORY_OWNER_CHARS)
        if not isinstance(query, str) or len(query) > MAX_QUERY_CHARS:
            raise InvalidValue(
                f"a memory query is a string of at most {MAX_QUERY_CHARS} characters"
            )
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_RECALL:
            raise InvalidValue(f"limit must be an integer 1-{MAX_RECALL}")
        phrases = query_phrases(query, MAX_QUERY_TERMS)
        if not phrases:
            return ()

        def search(raw: sqlite3.Connection) -> tuple[MemoryItem, ...]:
            if is_postgres(raw):
                return _items(raw, _pg_search(len(phrases)), [*phrases, agent, owner, limit])
            token = raw.execute(_OWNER_TOKEN, [agent, owner]).fetchone()
            if token is None:
                return ()
            match = _fts_query(str(token[0]), phrases)
            return _items(raw, _FTS_SEARCH, [match, agent, owner, limit])

        return await self._db.read(search)

    async def list_items(
        self, *, agent: str, owner: str, limit: int = 50, before: int | None = None
    ) -> tuple[MemoryItem, ...]:
        _name("agent", agent, MAX_MEMORY_OWNER_CHARS)
        _name("owner", owner, MAX_MEMORY_OWNER_CHARS)
        if (
            isinstance(limit, bool)
            or not isinstance(limit, int)
            or not 1 <= limit <= MAX_MEMORY_LIST
        ):
            raise InvalidValue(f"limit must be an integer 1-{MAX_MEMORY_LIST}")
        below = _MAX_ITEM_ID if before is None else _item_id(before)
        params: list[object] = [agent, owner, below, limit]
        return await self._db.read(lambda raw: _items(raw, _LIST, params))

    async def forget(
        self,
        *,
        agent: str,
        owner: str,
        item_id: int,
        by: PrincipalScope | None = None,
        reason: str | None = None,
    ) -> MemoryItem:
        _name("agent", agent, MAX_MEMORY_OWNER_CHARS)
        _name("owner", owner, MAX_MEMORY_OWNER_CHARS)
        item_id = _item_id(item_id)
        said = self._asked(by, reason, owner, "memory item")

        def delete(raw: sqlite3.Connection) -> MemoryItem | None:
            found = _items(
                raw,
                "DELETE FROM memory_items WHERE id = ? AND agent = ? AND principal_id = ? "
                f"RETURNING {', '.join(_COLUMNS)}",
                [item_id, agent, owner],
            )
            if not found:
                return None
            if by is not None:
                _audit(raw, by, said, agent, owner, found[0].item_id, 1, found[0].session_id)
            return found[0]

        forgotten = await self._db.write(delete)
        if forgotten is None:
            raise NotFoundOrUnauthorized("memory item")
        return forgotten

    async def forget_all(
        self,
        *,
        agent: str,
        owner: str,
        by: PrincipalScope | None = None,
        reason: str | None = None,
    ) -> int:
        _name("agent", agent, MAX_MEMORY_OWNER_CHARS)
        _name("owner", owner, MAX_MEMORY_OWNER_CHARS)
        said = self._asked(by, reason, owner, "memory")

        def delete(raw: sqlite3.Connection) -> int:
            count = raw.execute(
                "DELETE FROM memory_items WHERE agent = ? AND principal_id = ?", [agent, owner]
            ).rowcount
            if by is not None:
                _audit(raw, by, said, agent, owner, None, count, None)
            return int(count)

        return await self._db.write(delete)

    def _asked(self, by: PrincipalScope | None, reason: str | None, owner: str, kind: str) -> str:
        """The audited reason of a forget ``by`` someone outside a turn ("" for none).

        Only an operator forgets another principal's items: anyone else is told
        ``NotFoundOrUnauthorized``, as for an id that does not exist.
        """
        if by is None:
            return ""
        scope = self._db.verify_scope(by)
        said = check_reason(reason, "forgetting memory")
        if scope.authority != "operator" and scope.principal_id != owner:
            raise NotFoundOrUnauthorized(kind)
        return said

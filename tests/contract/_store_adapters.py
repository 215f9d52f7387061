"""The store adapters the store contract suites run against, behind one fixture shape.

Each suite is written against ``RuntimeStore``; only the few seeding and
inspection hooks below know the adapter (rows another group owns, such as a
running turn, and raw columns no interface method exposes on purpose). Both
adapters are SQL stores over ``write``/``read`` in the SQL both engines accept,
so the hooks are shared; "postgres" is a fresh database of the throwaway
cluster (tests/postgres.py) cloned from the migrated template.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hostkit.authority import AuthorityResolver
from hostkit.store import RowStore, RuntimeStore
from hostkit.types import PrincipalScope, new_id
from tests.postgres import active_cluster

ADAPTERS = ("sqlite", "postgres")


@dataclass(frozen=True)
class StoreUnderTest:
    """A freshly opened adapter, its one AuthorityResolver and adapter-specific hooks."""

    name: str
    store: RuntimeStore
    authority: AuthorityResolver
    operator: PrincipalScope
    # A running turn of ``session_id`` (the turns group owns turns) by the principal its
    # conversation is bound to; returns its id.
    seed_turn: Callable[[str], Awaitable[str]]
    # The raw arguments column of an approval, which no interface method reads back.
    raw_arguments: Callable[[str], Awaitable[str | None]]


@asynccontextmanager
async def open_store(name: str, tmp_path: Path) -> AsyncIterator[RuntimeStore]:
    """A fresh, empty store of adapter ``name`` (no AuthorityResolver bound yet)."""
    if name == "sqlite":
        async with RuntimeStore.open(tmp_path / "hostkit.db") as store:
            yield store
    elif name == "postgres":
        # The same database for the same tmp_path, as the SQLite file is (a reopen sees it).
        url = await active_cluster().database_for(tmp_path / "hostkit.db")
        async with RuntimeStore.open_postgres(url) as store:
            yield store
    else:
        raise ValueError(f"unknown store adapter {name!r}")


@asynccontextmanager
async def open_adapter(name: str, tmp_path: Path) -> AsyncIterator[StoreUnderTest]:
    async with open_store(name, tmp_path) as store:
        assert isinstance(store, RowStore)

        async def seed_turn(session_id: str) -> str:
            # A turn of the principal the session's conversation is bound to (who may run
            # that session's approved calls), else of a principal named "test".
            turn_id = new_id("turn")
            await store.write(
                lambda c: c.execute(
                    "INSERT INTO turns (turn_id, request_id, principal_id, session_id, core_id, "
                    "core_revision, generation, status, started_at) "
                    "VALUES (?, ?, COALESCE((SELECT b.principal_id FROM conversation_bindings b "
                    "WHERE b.session_id = ? LIMIT 1), 'test'), ?, 'assistant', 'rev1', 1, "
                    "'running', 'x')",
                    [turn_id, new_id("req"), session_id, session_id],
                )
            )
            return turn_id

        async def raw_arguments(approval_id: str) -> str | None:
            row = await store.read(
                lambda c: c.execute(
                    "SELECT arguments FROM approvals WHERE approval_id = ?", [approval_id]
                ).fetchone()
            )
            return None if row is None else str(row[0])

        async with AuthorityResolver.bind(store) as authority:
            operator = await authority.operator_issuer().issue(
                "ops", reason="store contract suite: read every owned row"
            )
            yield StoreUnderTest(name, store, authority, operator, seed_turn, raw_arguments)


# A PNG's bytes as the attachments table stored them before it had attachments_pending.
_PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(40))
_NAMED = "sha256:" + "1" * 64
_UNNAMED = "sha256:" + "2" * 64


async def seed_attachments_before_reclaim(store: RuntimeStore) -> tuple[str, str]:
    """On a store migrated to just before ``attachments_pending``: alice's and bob's rows of
    one ref a stored message (with NUL in its text) names, and alice's row of a ref no
    message names; beside
    messages whose ``attachments`` is no list of objects, or that only say the word.
    Returns (named ref, unnamed ref)."""
    assert isinstance(store, RowStore)
    session_id = await store.create_session(owner_kind="system", principal_id="alice")
    named = (
        '{"attachments":[{"media_type":"image/png","name":"a.png","ref":"'
        + _NAMED
        # NUL in its text, as a turn's input may have: PostgreSQL's JSON types refuse it.
        + '","size":48}],"text":"look\\u0000"}'
    )
    contents = (
        named,
        '{"attachments":"oops","text":"x"}',
        '{"attachments":[1,"x",null,{"name":"no ref"}],"text":"x"}',
        '{"text":"my \\"attachments\\" are gone"}',
    )

    def seed(c: Any) -> None:
        for principal_id, ref in (("alice", _NAMED), ("bob", _NAMED), ("alice", _UNNAMED)):
            c.execute(
                "INSERT INTO attachments (principal_id, ref, media_type, size, data, created_at) "
                "VALUES (?, ?, 'image/png', ?, ?, '2000-01-01T00:00:00.000Z')",
                [principal_id, ref, len(_PNG), _PNG],
            )
        for seq, content in enumerate(contents, start=1):
            c.execute(
                "INSERT INTO messages (message_id, session_id, seq, role, content, created_at) "
                "VALUES (?, ?, ?, 'user', ?, '2000-01-01T00:00:00.000Z')",
                [new_id("msg"), session_id, seq, content],
            )

    await store.write(seed)
    return _NAMED, _UNNAMED


async def assert_reclaim_backfilled(store: RuntimeStore, named: str, unnamed: str) -> None:
    """After the upgrade from ``seed_attachments_before_reclaim``: every principal's copy of
    the named ref is kept, the unnamed one is reclaimed (and only it)."""
    assert await store.attachments.reclaim(grace_s=3_600) == 1
    for principal_id, ref, kept in (
        ("alice", named, True),
        ("bob", named, True),
        ("alice", unnamed, False),
    ):
        found = await store.attachments.load(principal_id=principal_id, refs=[ref])
        assert (ref in found) == kept, (principal_id, ref)


_TAKEN = "sha256:" + "3" * 64
_BY_TURN = "sha256:" + "4" * 64
_WAITING = "sha256:" + "5" * 64
_UNHELD = "sha256:" + "6" * 64
_APPENDED = "sha256:" + "7" * 64


async def seed_attachments_before_refs(store: RuntimeStore) -> str:
    """On a store migrated to just before ``attachment_refs``, as that version left rows:
    alice's session, whose turnless message (with NUL in its text) names alice's taken
    bytes (and bob has a copy of them), whose turnless message an operator appended names
    the operator's bytes, and whose turn by carol names carol's (bob has a copy of those
    too); alice's upload pending since 2000; and alice's bytes a turn took with its
    input not written yet (neither pending nor named). Returns the session."""
    assert isinstance(store, RowStore)
    session_id = await store.create_session(owner_kind="system", principal_id="alice")
    turn_id = new_id("turn")

    def named(ref: str) -> str:
        return (
            '{"attachments":[{"media_type":"image/png","name":"a.png","ref":"'
            + ref
            + '","size":48}],"text":"look\\u0000"}'
        )

    def seed(c: Any) -> None:
        for principal_id, ref in (
            ("alice", _TAKEN),
            ("bob", _TAKEN),
            ("carol", _BY_TURN),
            ("bob", _BY_TURN),
            ("ops", _APPENDED),
            ("alice", _WAITING),
            ("alice", _UNHELD),
        ):
            c.execute(
                "INSERT INTO attachments (principal_id, ref, media_type, size, data, created_at) "
                "VALUES (?, ?, 'image/png', ?, ?, '2000-01-01T00:00:00.000Z')",
                [principal_id, ref, len(_PNG), _PNG],
            )
        c.execute(
            "INSERT INTO attachments_pending (principal_id, ref, added_at) "
            "VALUES ('alice', ?, '2000-01-01T00:00:00.000Z')",
            [_WAITING],
        )
        c.execute(
            "INSERT INTO turns (turn_id, request_id, principal_id, session_id, core_id, "
            "core_revision, generation, status, started_at) "
            "VALUES (?, ?, 'carol', ?, 'assistant', 'rev1', 1, 'completed', 'x')",
            [turn_id, new_id("req"), session_id],
        )
        for seq, (content, turn) in enumerate(
            (
                (named(_TAKEN), None),
                (named(_BY_TURN), turn_id),
                ('{"attachments":"oops"}', None),
                (named(_APPENDED), None),
            ),
            start=1,
        ):
            c.execute(
                "INSERT INTO messages (message_id, session_id, seq, role, content, turn_id, "
                "created_at) VALUES (?, ?, ?, 'user', ?, ?, '2000-01-01T00:00:00.000Z')",
                [new_id("msg"), session_id, seq, content, turn],
            )

    await store.write(seed)
    return session_id


async def assert_refs_backfilled(store: RuntimeStore, session_id: str) -> None:
    """After the upgrade from ``seed_attachments_before_refs``: the session references the
    bytes its messages name: a turn's message its principal's copy, a turnless message
    (whoever wrote it) every principal's, as v22 kept them; bytes nothing references are
    pending (the old upload since it was added, the rest from the upgrade on), so a
    reclaim takes the old upload now and the rest after the grace period, never
    referenced bytes."""
    assert isinstance(store, RowStore)
    refs = await store.read(
        lambda c: c.execute(
            "SELECT principal_id, ref, session_id FROM attachment_refs ORDER BY principal_id"
        ).fetchall()
    )
    assert [tuple(row) for row in refs] == [
        ("alice", _TAKEN, session_id),
        ("bob", _TAKEN, session_id),
        ("carol", _BY_TURN, session_id),
        ("ops", _APPENDED, session_id),
    ]
    pending = await store.read(
        lambda c: c.execute(
            "SELECT principal_id, ref, uploads FROM attachments_pending ORDER BY principal_id, ref"
        ).fetchall()
    )
    assert [tuple(row) for row in pending] == [
        ("alice", _WAITING, 1),
        ("alice", _UNHELD, 1),
        ("bob", _BY_TURN, 1),
    ]
    assert await store.attachments.reclaim(grace_s=3_600) == 1
    assert await store.attachments.reclaim(grace_s=0) == 2
    for principal_id, ref, kept in (
        ("alice", _TAKEN, True),
        ("carol", _BY_TURN, True),
        ("bob", _TAKEN, True),
        ("ops", _APPENDED, True),
        ("bob", _BY_TURN, False),
        ("alice", _WAITING, False),
        ("alice", _UNHELD, False),
    ):
        found = await store.attachments.load(principal_id=principal_id, refs=[ref])
        assert (ref in found) == kept, (principal_id, ref)


async def seed_memory_before_provenance(store: RuntimeStore) -> list[int]:
    """On a store migrated to just before memory provenance: alice's two items and bob's
    one, as that version's ``remember`` wrote them. Returns their ids."""
    return await _insert_items(
        store,
        (
            ("alice", "alice likes tea"),
            ("bob", "bob likes tea"),
            ("alice", "alice planted this"),
        ),
    )


async def assert_memory_kept_untraced(store: RuntimeStore, ids: list[int]) -> None:
    """After the upgrade from ``seed_memory_before_provenance``: every item kept under its
    id, searchable, with no provenance; a forgotten newest id is never given again."""
    memory = store.memory
    listed = await memory.list_items(agent="assistant", owner="alice")
    assert [(i.item_id, i.text) for i in listed] == [
        (ids[2], "alice planted this"),
        (ids[0], "alice likes tea"),
    ]
    assert all((i.session_id, i.turn_id) == (None, None) for i in listed)
    found = await memory.recall(agent="assistant", owner="bob", query="tea")
    assert [(i.item_id, i.text) for i in found] == [(ids[1], "bob likes tea")]
    await memory.forget(agent="assistant", owner="alice", item_id=ids[2])
    fresh = await memory.remember(
        agent="assistant", owner="alice", text="a fact", session_id="ses_1", turn_id="turn_1"
    )
    assert fresh.item_id > ids[2]
    assert await memory.recall(agent="assistant", owner="alice", query="planted") == ()


async def seed_before_owner_search(store: RuntimeStore) -> tuple[list[int], str]:
    """On a store migrated to just before owner search (SQLite v23, PostgreSQL v10):
    alice's two items and bob's one, and a session's effect audit view beside a row of
    another kind. Returns the item ids and the session."""
    ids = await _insert_items(
        store,
        (
            ("alice", "alice likes tea"),
            ("bob", "bob likes tea"),
            ("alice", "alice drinks tea at noon"),
        ),
    )
    session = await store.create_session(owner_kind="system", principal_id="suite")
    for n, kind in enumerate(("effect.probe", "turn.note")):
        detail = {"turn_id": "turn_old", "call_id": f"c{n}", "outcome": "succeeded"}
        await store.audit(kind, session_id=session, subject=f"c{n}", detail=detail)
    return ids, session


async def _insert_items(store: RuntimeStore, items: tuple[tuple[str, str], ...]) -> list[int]:
    """The items as a ``remember`` of a version before provenance or search words wrote
    them (no session, turn or words)."""
    assert isinstance(store, RowStore)

    def seed(c: Any) -> list[int]:
        return [
            int(
                c.execute(
                    "INSERT INTO memory_items (agent, principal_id, text, created_at) "
                    "VALUES ('assistant', ?, ?, '2000-01-01T00:00:00.000Z') RETURNING id",
                    [owner, text],
                ).fetchone()[0]
            )
            for owner, text in items
        ]

    return await store.write(seed)


WORDS_ITEMS = (
    ("alice", "email bob@example.com"),
    ("alice", "ÉCOLE normale, python 3.11"),
    ("bob", "café au lait at https://example.org/menu"),
)


async def seed_before_search_words(store: RuntimeStore) -> list[int]:
    """On a store migrated to just before search words (SQLite v26, PostgreSQL v13):
    items whose words each engine split or folded its own way. Returns their ids."""
    return await _insert_items(store, WORDS_ITEMS)


async def assert_search_words_backfilled(store: RuntimeStore, ids: list[int]) -> None:
    """After the upgrade from ``seed_before_search_words``: every old item holds its words
    and is found by them (and only its owner's), as a new item is."""
    assert isinstance(store, RowStore)
    memory = store.memory
    kept = await store.read(
        lambda c: c.execute("SELECT id, search_words FROM memory_items ORDER BY id").fetchall()
    )
    assert [tuple(row) for row in kept] == [
        (ids[0], "email bob example com"),
        (ids[1], "ecole normale python 3 11"),
        (ids[2], "cafe au lait at https example org menu"),
    ]

    async def recalled(owner: str, query: str) -> list[int]:
        found = await memory.recall(agent="assistant", owner=owner, query=query, limit=20)
        return sorted(item.item_id for item in found)

    assert await recalled("alice", "example") == [ids[0]]
    assert await recalled("alice", "ecole 11") == [ids[1]]
    assert await recalled("bob", "CAFE menu") == [ids[2]]
    assert await recalled("bob", "bob") == []
    await memory.forget(agent="assistant", owner="alice", item_id=ids[0])
    fresh = await memory.remember(agent="assistant", owner="alice", text="École again")
    assert await recalled("alice", "example") == []
    assert await recalled("alice", "école") == [ids[1], fresh.item_id]


async def assert_owner_search_backfilled(store: RuntimeStore, ids: list[int], session: str) -> None:
    """After the upgrade from ``seed_before_owner_search``: each owner recalls their own
    old items, ranked as before, and only theirs; a new item joins its owner's, also once
    the item that named the owner is forgotten; the session's audit view is found."""
    memory = store.memory

    async def recalled(owner: str) -> list[int]:
        found = await memory.recall(agent="assistant", owner=owner, query="tea noon")
        return [item.item_id for item in found]

    assert await recalled("alice") == [ids[2], ids[0]]
    assert await recalled("bob") == [ids[1]]
    await memory.forget(agent="assistant", owner="alice", item_id=ids[0])
    fresh = await memory.remember(agent="assistant", owner="alice", text="more tea")
    assert await recalled("alice") == [ids[2], fresh.item_id]
    assert await recalled("bob") == [ids[1]]
    async with AuthorityResolver.bind(store) as resolver:
        operator = await resolver.operator_issuer().issue("ops", reason="read effect audits")
        (view,) = await store.inspect.effect_audits(operator, session)
    assert (view.kind, view.subject) == ("effect.probe", "c0")

"""Owned queries: the owner predicate lives in SQL; missing and not-yours look the same."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio
import pytest

from hostkit.authority import AuthorityResolver
from hostkit.errors import InvalidValue, NotFoundOrUnauthorized, ScopeError
from hostkit.store import RuntimeStore
from hostkit.store._owned import owner_predicate
from hostkit.types import MAX_ALLOWED_SESSIONS, PrincipalScope
from tests.support import facts

pytestmark = pytest.mark.anyio


async def denial_reasons(store: RuntimeStore, operator: PrincipalScope) -> dict[str, str]:
    rows = await store.read_audit(operator, kind="principal_scope.owner_lookup_denied")
    return {row.subject or "": row.reason or "" for row in rows}


async def insert_legacy_and_ownerless(store: RuntimeStore) -> None:
    def rows(c: sqlite3.Connection) -> None:
        c.execute("INSERT INTO sessions (session_id, created_at) VALUES ('ses_legacy', 'x')")
        c.execute(
            "INSERT INTO session_owners (session_id, owner_kind, recorded_at) "
            "VALUES ('ses_legacy', 'legacy_local', 'x')"
        )
        c.execute("INSERT INTO sessions (session_id, created_at) VALUES ('ses_ownerless', 'x')")
        c.execute(
            "INSERT INTO tasks (task_id, session_id, kind, status, created_at, updated_at) "
            "VALUES ('task_legacy', 'ses_legacy', 'job', 'done', 'x', 'x')"
        )

    await store.write(rows)


async def test_cross_owner_read_gets_the_same_answer_as_missing(
    authority: AuthorityResolver, store: RuntimeStore, operator: PrincipalScope
) -> None:
    alice = await authority.for_conversation(facts("a", "alice"))
    bob = await authority.for_conversation(facts("b", "bob"))
    with pytest.raises(NotFoundOrUnauthorized) as not_yours:
        await store.get_session(bob, alice.session_id or "")
    with pytest.raises(NotFoundOrUnauthorized) as missing:
        await store.get_session(bob, "ses_does_not_exist")
    assert str(not_yours.value) == str(missing.value)
    reasons = await denial_reasons(store, operator)
    assert reasons[f"session:{alice.session_id}"] == "unauthorized"
    assert reasons["session:ses_does_not_exist"] == "missing"


async def test_denial_audit_records_every_real_reason(
    authority: AuthorityResolver, store: RuntimeStore, operator: PrincipalScope
) -> None:
    await insert_legacy_and_ownerless(store)
    someone = await authority.for_conversation(facts("someone"))
    for session_id in ("ses_legacy", "ses_ownerless"):
        with pytest.raises(NotFoundOrUnauthorized):
            await store.get_session(someone, session_id)
    with pytest.raises(NotFoundOrUnauthorized):
        await store.get_task(someone, "task_legacy")
    reasons = await denial_reasons(store, operator)
    assert reasons["session:ses_legacy"] == "legacy_repair_required"
    assert reasons["session:ses_ownerless"] == "missing_durable_owner"
    assert reasons["task:task_legacy"] == "legacy_repair_required"


async def test_messages_are_read_and_written_only_by_their_owner(
    authority: AuthorityResolver, store: RuntimeStore
) -> None:
    alice = await authority.for_conversation(facts("a", "alice"))
    mallory = await authority.for_conversation(facts("m", "mallory"))
    session = alice.session_id or ""
    for i in range(5):
        record = await store.append_message(alice, session, role="user", content={"i": i})
        assert record.seq == i + 1
    with pytest.raises(NotFoundOrUnauthorized):
        await store.append_message(mallory, session, role="user", content={"evil": True})
    with pytest.raises(NotFoundOrUnauthorized):
        await store.list_messages(mallory, session)
    page = await store.list_messages(alice, session, limit=3)
    assert [m.content["i"] for m in page.items] == [0, 1, 2]
    rest = await store.list_messages(alice, session, cursor=page.next_cursor, limit=3)
    assert [m.content["i"] for m in rest.items] == [3, 4]
    assert rest.next_cursor is None
    after = await store.list_messages(alice, session, after_seq=4)
    assert [m.seq for m in after.items] == [5]


async def test_tasks_are_owned_through_their_session(
    authority: AuthorityResolver, store: RuntimeStore, operator: PrincipalScope
) -> None:
    alice = await authority.for_conversation(facts("a", "alice"))
    bob = await authority.for_conversation(facts("b", "bob"))
    task = await store.create_task(alice, alice.session_id or "", kind="research", detail={"q": 1})
    assert (await store.get_task(alice, task.task_id)).detail == {"q": 1}
    with pytest.raises(NotFoundOrUnauthorized):
        await store.get_task(bob, task.task_id)
    with pytest.raises(NotFoundOrUnauthorized):
        await store.create_task(bob, alice.session_id or "", kind="sneaky")
    assert (await store.list_tasks(bob)).items == ()
    assert [t.task_id for t in (await store.list_tasks(alice)).items] == [task.task_id]
    everything = await store.list_tasks(operator, session_id=alice.session_id)
    assert [t.task_id for t in everything.items] == [task.task_id]


async def test_operator_lists_every_owned_session_with_keyset_pages(
    authority: AuthorityResolver, store: RuntimeStore, operator: PrincipalScope
) -> None:
    created = [
        (await authority.for_conversation(facts(f"c{i}"))).session_id
        for i in range(MAX_ALLOWED_SESSIONS + 9)
    ]
    seen: list[str] = []
    cursor = None
    while True:
        page = await store.list_sessions(operator, cursor=cursor, limit=7)
        seen.extend(s.session_id for s in page.items)
        cursor = page.next_cursor
        if cursor is None:
            break
    assert sorted(seen) == sorted(created)
    assert seen == list(reversed(created)), "newest first, no duplicates across pages"


async def test_conversation_lists_only_its_own_session(
    authority: AuthorityResolver, store: RuntimeStore
) -> None:
    alice = await authority.for_conversation(facts("a", "alice"))
    await authority.for_conversation(facts("b", "bob"))
    page = await store.list_sessions(alice)
    assert [s.session_id for s in page.items] == [alice.session_id]


async def test_legacy_rows_are_invisible_to_every_normal_query(
    authority: AuthorityResolver, store: RuntimeStore, operator: PrincipalScope
) -> None:
    await insert_legacy_and_ownerless(store)
    with pytest.raises(NotFoundOrUnauthorized):
        await store.get_session(operator, "ses_legacy")
    with pytest.raises(NotFoundOrUnauthorized):
        await store.get_task(operator, "task_legacy")
    with pytest.raises(NotFoundOrUnauthorized):
        await store.list_messages(operator, "ses_legacy")
    listed = {s.session_id for s in (await store.list_sessions(operator)).items}
    assert "ses_legacy" not in listed
    assert "ses_ownerless" not in listed
    assert "task_legacy" not in {t.task_id for t in (await store.list_tasks(operator)).items}
    with pytest.raises(NotFoundOrUnauthorized):
        await store.append_message(operator, "ses_legacy", role="user", content={})


async def test_legacy_repair_path_requires_live_operator_exact_id_and_reason(
    authority: AuthorityResolver, store: RuntimeStore, operator: PrincipalScope
) -> None:
    await insert_legacy_and_ownerless(store)
    view = await store.query_legacy_for_repair(
        operator, session_id="ses_legacy", reason="ticket 7: reassign"
    )
    assert view.owner_status == "legacy_local"
    assert view.session is not None
    assert view.session.session_id == "ses_legacy"
    task_view = await store.query_legacy_for_repair(
        operator, task_id="task_legacy", reason="ticket 7"
    )
    assert task_view.task is not None
    assert task_view.task.session_id == "ses_legacy"
    ownerless = await store.query_legacy_for_repair(
        operator, session_id="ses_ownerless", reason="ticket 8"
    )
    assert ownerless.owner_status == "missing"
    accessed = await store.read_audit(operator, kind="principal_scope.legacy_repair_accessed")
    assert [(row.subject, row.reason) for row in accessed] == [
        ("session:ses_legacy", "ticket 7: reassign"),
        ("task:task_legacy", "ticket 7"),
        ("session:ses_ownerless", "ticket 8"),
    ]

    conversation = await authority.for_conversation(facts("c"))
    with pytest.raises(ScopeError, match="operator"):
        await store.query_legacy_for_repair(conversation, session_id="ses_legacy", reason="r")
    with pytest.raises(ScopeError, match="reason"):
        await store.query_legacy_for_repair(operator, session_id="ses_legacy", reason=" ")
    with pytest.raises(InvalidValue, match="exactly one"):
        await store.query_legacy_for_repair(operator, reason="r")
    with pytest.raises(InvalidValue, match="exactly one"):
        await store.query_legacy_for_repair(
            operator, session_id="ses_legacy", task_id="task_legacy", reason="r"
        )
    # A normally owned row is not served by the repair path.
    with pytest.raises(NotFoundOrUnauthorized):
        await store.query_legacy_for_repair(
            operator, session_id=conversation.session_id, reason="r"
        )


async def test_repair_path_rejects_revoked_operator(
    authority: AuthorityResolver, store: RuntimeStore
) -> None:
    await insert_legacy_and_ownerless(store)
    issuer = authority.operator_issuer()
    scope = await issuer.issue("ops", reason="r")
    issuer.revoke()
    with pytest.raises(ScopeError, match="revoked"):
        await store.query_legacy_for_repair(scope, session_id="ses_legacy", reason="r")


async def test_audit_is_host_only(authority: AuthorityResolver, store: RuntimeStore) -> None:
    conversation = await authority.for_conversation(facts("c"))
    with pytest.raises(ScopeError, match="operator"):
        await store.read_audit(conversation)


@pytest.mark.parametrize("limit", [0, -1, 501])
async def test_page_limits_are_bounded(
    store: RuntimeStore, operator: PrincipalScope, limit: int
) -> None:
    with pytest.raises(InvalidValue, match="limit"):
        await store.list_sessions(operator, limit=limit)


async def test_bad_cursor_is_a_typed_error(store: RuntimeStore, operator: PrincipalScope) -> None:
    with pytest.raises(InvalidValue, match="cursor"):
        await store.list_sessions(operator, cursor="not-a-cursor")


@pytest.mark.parametrize("after", [-1, 2**63, 2**64, True, "0", 0.5])
async def test_an_id_cursor_past_a_64_bit_column_is_refused_alike(
    store: RuntimeStore, operator: PrincipalScope, after: object
) -> None:
    # SQLite cannot bind an int past 64 bits (a raw OverflowError) where PostgreSQL
    # compared it as numeric and answered: both refuse it before the query.
    with pytest.raises(InvalidValue, match="after_id"):
        await store.read_audit(operator, after_id=after)  # type: ignore[arg-type]
    with pytest.raises(InvalidValue, match="after_seq"):
        await store.list_messages(operator, "ses_x", after_seq=after)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", [7, "", "a\x00b"], ids=["int", "empty", "nul"])
async def test_an_audit_kind_that_is_no_text_is_refused_alike(
    store: RuntimeStore, operator: PrincipalScope, kind: object
) -> None:
    # SQLite answered () where PostgreSQL failed the read (text = integer, NUL in text).
    with pytest.raises(InvalidValue, match="kind") as refused:
        await store.read_audit(operator, kind=kind)  # type: ignore[arg-type]
    assert "PostgreSQL" not in str(refused.value)


async def test_the_largest_id_cursor_reads_past_every_row(
    store: RuntimeStore, operator: PrincipalScope
) -> None:
    assert await store.read_audit(operator, after_id=2**63 - 1) == ()
    assert await store.read_audit(operator, after_id=0)


def _plan(path: Path, sql: str, params: list[object]) -> str:
    conn = sqlite3.connect(str(path))
    try:
        rows = conn.execute(f"EXPLAIN QUERY PLAN {sql}", params).fetchall()
        return " | ".join(str(row[-1]) for row in rows)
    finally:
        conn.close()


@pytest.mark.sqlite_only("EXPLAIN QUERY PLAN on the SQLite file through sqlite3")
async def test_owner_predicates_use_indexes_not_bind_lists(
    db_path: Path, authority: AuthorityResolver, operator: PrincipalScope
) -> None:
    conversation = await authority.for_conversation(facts("c"))
    where, params = owner_predicate(operator)
    assert params == [], "operator reads use a relational predicate, not a bind list"
    sql = (
        "SELECT s.session_id FROM sessions s JOIN session_owners o ON o.session_id = s.session_id "
        f"WHERE {where} AND s.id < ? ORDER BY s.id DESC LIMIT 50"
    )
    plan = await anyio.to_thread.run_sync(_plan, db_path, sql, [*params, 2**62])
    assert "SCAN s" not in plan.replace("SCAN s USING INTEGER PRIMARY KEY", "")
    assert "session_owners" in plan or "o USING" in plan
    where, params = owner_predicate(conversation)
    assert len(params) == 3
    tasks_sql = (
        "SELECT t.task_id FROM tasks t JOIN session_owners o ON o.session_id = t.session_id "
        f"WHERE {where} AND t.session_id = ? AND t.id < ? ORDER BY t.id DESC LIMIT 50"
    )
    task_plan = await anyio.to_thread.run_sync(
        _plan, db_path, tasks_sql, [*params, conversation.session_id, 2**62]
    )
    assert "tasks_session" in task_plan or "PRIMARY KEY" in task_plan
